"""The poison lint: a memory is a fact about its subject, never an
instruction to the agent. A text that reads as one (a prompt injection, an
exfiltration, a standing order to send something somewhere) is refused,
with the rule it broke, before anything is written.

Patterns, not a model: the lint must be cheap, deterministic and say why.
It errs towards refusing; a refused fact can be restated plainly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Longest memory text, in characters.
MAX_TEXT = 2000


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    why: str


def _r(name: str, pattern: str, why: str) -> Rule:
    return Rule(name, re.compile(pattern, re.IGNORECASE | re.DOTALL), why)


_SEND = r"(send|forward|e-?mail|post|upload|copy|leak|share|transmit|report|cc|bcc)"

RULES: tuple[Rule, ...] = (
    _r(
        "override",
        r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}\b(previous|prior|above|earlier|"
        r"all|any|your|the|system)\b.{0,30}\b(instructions?|rules?|prompts?|guidelines?|"
        r"constitution|polic(y|ies))\b",
        "it tells the agent to set aside its instructions (a prompt injection)",
    ),
    _r(
        "role",
        r"\b(you are now|from now on,? you|act as|pretend (to be|you are)|new instructions?|"
        r"system prompt|developer mode|jailbreak)\b",
        "it tries to change who the agent is or what it was told (a prompt injection)",
    ),
    _r(
        "markup",
        r"(<\|?(im_start|im_end|system|endoftext)\|?>|\[/?(INST|SYS)\]|^\s*#{2,}\s*(system|"
        r"instruction))",
        "it carries chat-template markup (a prompt injection)",
    ),
    _r(
        "standing-order",
        r"\b(always|every time|whenever|each time|automatically|from now on)\b.{0,60}\b"
        + _SEND
        + r"\b.{0,80}\bto\b",
        "it is a standing order to send something somewhere, not a fact (exfiltration)",
    ),
    _r(
        "exfiltrate",
        r"\b" + _SEND + r"\b.{0,80}\b(password|passwords|secrets?|api[ _-]?keys?|tokens?|"
        r"credentials?|private keys?|conversations?|messages|chat history|memor(y|ies)|files)\b"
        r".{0,80}\b(to|at)\b",
        "it asks for secrets or conversations to be sent out (exfiltration)",
    ),
    _r(
        "url-payload",
        r"https?://\S+[?&][^\s=]+=\s*(\{|\$|%7b)",
        "it carries a URL built to smuggle data out (exfiltration)",
    ),
    _r(
        "hide",
        r"\b(do not|don't|never)\b.{0,20}\b(tell|inform|mention|show|reveal to)\b.{0,20}\b"
        r"(the user|the owner|anyone|him|her|them)\b",
        "it asks the agent to hide something from the person it serves",
    ),
    _r(
        "obey",
        r"\b(must|shall|should) (always )?(obey|follow|execute|run|comply with)\b",
        "it is an order to the agent, not a fact about the subject",
    ),
)


def lint(text: str) -> tuple[str, str] | None:
    """(rule name, why) of the first rule ``text`` breaks, or None."""
    for rule in RULES:
        if rule.pattern.search(text):
            return rule.name, rule.why
    return None


__all__ = ["MAX_TEXT", "RULES", "Rule", "lint"]
