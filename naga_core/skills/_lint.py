"""The checks before a skill is written by the agent: the poison lint and
the near-duplicate check (docs/design/skills.md, "Sedimentation").

The poison lint refuses text that would turn a skill into an attack on
whoever loads it later: prompt injection (instructions aimed at the model
rather than the task), exfiltration instructions (send secrets or private
files somewhere), secrets themselves, and URLs that carry credentials.
A skill is loaded into prompts of later turns, possibly other peers', so a
false positive costs one unsaved skill and a false negative costs a leak:
the patterns lean towards refusing.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from naga_core.skills._errors import Reason, SkillRefused
from naga_core.skills._text import cosine, weighted


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason the lint refuses: its kind and the text that matched."""

    kind: str
    excerpt: str


_F = re.IGNORECASE | re.DOTALL
_SECRET_WORDS = (
    r"(?:secrets?|credentials?|passwords?|passwd|api[ _-]?keys?|tokens?|cookies?|private keys?|"
    r"\.ssh|id_rsa|id_ed25519|providers\.json|\.env\b|env(?:ironment)? var(?:iable)?s?|"
    r"/etc/(?:passwd|shadow)|naga_home|keys?/token\.key|owner\.token|wallet|seed phrase)"
)
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "prompt_injection",
        re.compile(
            r"\b(?:ignore|disregard|forget|override)\b.{0,40}\b(?:previous|prior|above|earlier|"
            r"all|your|system|safety)\b.{0,30}\b(?:instructions?|rules?|prompts?|guidelines|"
            r"constraints|polic(?:y|ies))",
            _F,
        ),
    ),
    (
        "prompt_injection",
        re.compile(
            r"\b(?:reveal|print|repeat|show|leak|output)\b.{0,30}\b(?:system prompt|your "
            r"instructions|hidden instructions|constitution)",
            _F,
        ),
    ),
    (
        "prompt_injection",
        re.compile(
            r"\b(?:you are now|from now on you (?:are|must)|act as (?:an? )?(?:unrestricted|"
            r"jailbroken|unfiltered)|developer mode|do anything now|\bDAN\b)",
            _F,
        ),
    ),
    (
        "prompt_injection",
        re.compile(
            r"\b(?:do not|don't|never)\s+(?:tell|inform|mention (?:this )?to|show|alert)\s+"
            r"(?:the )?(?:user|owner|human)",
            _F,
        ),
    ),
    ("prompt_injection", re.compile(r"<\|im_start\|>|<\|system\|>|\[/?INST\]|<</?SYS>>", _F)),
    (
        "exfiltration",
        re.compile(
            r"\b(?:send|post|upload|exfiltrate|forward|e-?mail|transmit|leak|copy|curl|wget|"
            r"paste)\b.{0,80}" + _SECRET_WORDS,
            _F,
        ),
    ),
    (
        "exfiltration",
        re.compile(
            _SECRET_WORDS + r".{0,60}\b(?:to|into)\s+(?:https?://|ftp://|\S+@\S+\.\w+|"
            r"(?:a|my|this|the) (?:server|webhook|endpoint|pastebin|gist|url))",
            _F,
        ),
    ),
    (
        "exfiltration",
        re.compile(
            r"(?:curl|wget|httpie|http)\b[^\n]{0,120}(?:-d\s*@|--data(?:-binary)?\s*@|-F\s*\S*=@|"
            r"-T\s)|\|\s*(?:nc|ncat|netcat|curl|wget)\b|base64[^\n]{0,40}\|\s*(?:curl|nc)",
            _F,
        ),
    ),
    (
        "exfiltration",
        re.compile(
            r"(?:webhook\.site|requestbin|pipedream\.net|ngrok(?:-free)?\.(?:io|app)|"
            r"burpcollaborator|interact\.sh|oast\.(?:fun|pro|live))",
            _F,
        ),
    ),
    ("secret", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("secret", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}")),
    ("secret", re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}")),
    ("secret", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("secret", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("secret", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("secret", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    (
        "secret",
        re.compile(
            r"\b(?:api[_-]?key|secret(?:[_-]?key)?|password|passwd|access[_-]?token|auth[_-]?token|"
            r"bearer)\b\s*[:=]?\s*[\"']?(?![<{$]|x{3,}|\*{3,}|your|example|placeholder|redacted)"
            r"[A-Za-z0-9_\-+/=.]{12,}",
            re.IGNORECASE,
        ),
    ),
    (
        "credential_url",
        re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE),
    ),
    (
        "credential_url",
        re.compile(
            r"https?://\S+[?&](?:token|access_token|api_key|apikey|key|secret|password|sig|"
            r"signature|auth)=[^&\s<{$]{6,}",
            re.IGNORECASE,
        ),
    ),
)


def poison(text: str) -> list[Finding]:
    """What in ``text`` is poison (empty: nothing found)."""
    found: list[Finding] = []
    for kind, pattern in _PATTERNS:
        m = pattern.search(text)
        if m is not None:
            found.append(Finding(kind, m.group(0)[:120]))
    return found


#: The lint's rule names, as findings and ``--allow-lint`` name them.
POISON_KINDS = frozenset(kind for kind, _ in _PATTERNS)


def lint_import(files: Mapping[str, bytes], allow: Collection[str] = ()) -> str:
    """The poison lint over an owner's import: every text file of the folder
    (SKILL.md, scripts, references), since a downloaded skill is not the
    owner's words and is injected into later prompts. A finding whose rule
    is not in ``allow`` refuses the import (:class:`SkillRefused`, POISON,
    naming the rule, the file and the text); the findings the owner allowed
    come back as a note for the version's reason (empty: none)."""
    unknown = sorted(set(allow) - POISON_KINDS)
    if unknown:
        raise SkillRefused(
            Reason.BAD_FORMAT,
            f"--allow-lint {unknown[0]!r} is not a lint rule "
            f"(the rules: {', '.join(sorted(POISON_KINDS))})",
        )
    found: list[tuple[str, Finding]] = []
    for path, data in sorted(files.items()):
        try:
            text = data.decode()
        except UnicodeDecodeError:
            continue  # an asset: never put into a prompt as text
        found.extend((path, f) for f in poison(text))
    said = [f"{f.kind} in {path}: {f.excerpt!r}" for path, f in found]
    refused = [s for (_, f), s in zip(found, said, strict=True) if f.kind not in allow]
    if refused:
        kinds = sorted({f.kind for _, f in found if f.kind not in allow})
        raise SkillRefused(
            Reason.POISON,
            f"poison lint: {'; '.join(refused)}. Nothing imported; if you trust these lines, "
            f"import it with {' '.join(f'--allow-lint {k}' for k in kinds)}",
        )
    return f"poison lint allowed by the owner: {'; '.join(said)}" if said else ""


@dataclass(frozen=True, slots=True)
class Near:
    """The most similar existing skill and how similar (0..1)."""

    key: str
    similarity: float


def near_duplicate(
    name: str,
    description: str,
    body: str,
    existing: Sequence[tuple[str, str, str, str]],
) -> Near | None:
    """The existing skill (key, name, description, body) most similar to
    the candidate over name, description and body; None when there is none.
    A skill of the same name counts as identical."""
    mine = weighted(name, description, body)
    best: Near | None = None
    for key, n, d, b in existing:
        sim = 1.0 if n == name else cosine(mine, weighted(n, d, b))
        if best is None or sim > best.similarity:
            best = Near(key, sim)
    return best


def similarity(a: tuple[str, str, str], b: tuple[str, str, str]) -> float:
    return cosine(weighted(*a), weighted(*b))


__all__ = [
    "POISON_KINDS",
    "Finding",
    "Near",
    "lint_import",
    "near_duplicate",
    "poison",
    "similarity",
]
