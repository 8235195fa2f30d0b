"""The agent's use of the skill library (docs/design/skills.md): what a
turn is offered, its ``skill.view`` calls, and after it the review that
may distil a skill, and the turn's ``skill.turn`` record.

The review runs after the turn's reply was recorded and sent (it delays
no answer), as one model call of the turn (traced, debited from its
budget), with a named tool for structured output. "Nothing" is its
default; everything it proposes goes through naga_core.skills'
sedimentation rules before anything is written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from naga.executor import tool_name
from naga.policy import TrustPolicy
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga_core.agent import _sessions as rec
from naga_core.agent._config import EXECUTOR_ROLE
from naga_core.agent._core import Core
from naga_core.agent._memory_tools import subject as memory_subject
from naga_core.agent._turn import Running
from naga_core.authz import Grant, Token, TokenAuthority
from naga_core.errors import NagaError
from naga_core.skills import (
    REVIEW_PROMPT,
    REVIEW_SCHEMA,
    REVIEW_TOOL,
    VIEW_TOOL,
    Library,
    Offer,
    Outcome,
    Proposal,
    judge_and_write,
)

log = logging.getLogger("naga.agent")

#: Stands for ExecutorCalls.traced_call (a model call of the turn).
TracedCall = Callable[..., Awaitable[tuple[apb.ProviderReply, int]]]
_TRACE_CHARS = 24_000
REVIEW_KIND = "turn.skill_review"


@dataclass(slots=True)
class TurnSkills:
    offer: Offer
    text: str
    viewed: list[str] = field(default_factory=list[str])


def viewed_versions(steps: list[mpb.ChatMessage]) -> list[bytes]:
    """The skill versions whose folder a turn's recorded steps (its resumed
    context: answers, then results) were told of, in order, once each: the
    results of its ``skill.view`` calls that answered with a ``dir``."""
    views = {
        c.id
        for m in steps
        if m.role == mpb.ROLE_ASSISTANT
        for c in m.tool_calls
        if tool_name(c.name) == VIEW_TOOL
    }
    out: list[bytes] = []
    for m in steps:
        if m.role != mpb.ROLE_TOOL or m.tool_error or m.tool_call_id not in views:
            continue
        try:
            result: object = json.loads(m.content)
            if not isinstance(result, dict) or not result.get("dir"):  # pyright: ignore[reportUnknownMemberType]
                continue
            commit = bytes.fromhex(str(result["version"]))  # pyright: ignore[reportUnknownArgumentType]
        except (ValueError, KeyError):
            continue  # not a result the core wrote: nothing to restore
        if commit not in out:
            out.append(commit)
    return out


class SkillUse:
    """Per running turn: what it was offered and viewed."""

    def __init__(self, core: Core, library: Library, opener: rec.Opener | None = None) -> None:
        self.core = core
        self.library = library
        #: Opens the turn's sealed tool records (naga_core.memory.Sealer).
        self.opener: rec.Opener = opener if opener is not None else (lambda _kind, body: body)
        self._turns: dict[str, TurnSkills] = {}

    def offer(self, running: Running, text: str) -> Offer:
        settings = self.core.settings
        offer = self.library.offer(
            running.session,
            running.peer,
            text,
            most=settings.get_int("skills.offer_max"),
            cap_tokens=settings.get_int("skills.offer_tokens"),
        )
        self._turns[running.id] = TurnSkills(offer, text)
        return offer

    async def view(self, running: Running, arguments_json: str) -> apb.ToolCallResponse:
        viewed = await self.library.view(running.session, running.peer, arguments_json)
        if not viewed.ok:
            return apb.ToolCallResponse(ok=False, error=viewed.text)
        turn = self._turns.get(running.id)
        if turn is not None:
            turn.viewed.append(viewed.key)
        if viewed.folder and viewed.folder not in running.skill_dirs:
            running.skill_dirs.append(viewed.folder)  # its shell commands may run its scripts
        return apb.ToolCallResponse(ok=True, result_json=viewed.text)

    async def resumed(self, running: Running) -> None:
        """A turn re-run after a stop of the core gets back the folders of
        the versions its recorded ``skill.view`` calls showed (the start
        cleared them), written again: a re-run shell step finds its script
        (docs/adr/0054-lead11-skill-scripts-and-quiet-subscriptions.md)."""
        for commit in viewed_versions(running.resume):
            folder = await self.library.files_of_commit(commit)
            if folder and folder not in running.skill_dirs:
                running.skill_dirs.append(folder)

    async def after(
        self,
        running: Running,
        outcome: apb.ExecutorOutcome,
        *,
        policy: TrustPolicy,
        call: TracedCall,
        authority: TokenAuthority,
        token: Token | None,
    ) -> Outcome | None:
        """:meth:`finish` with the turn's own grant; a failure here is
        logged, never the turn's (its reply is out already)."""
        grant: Grant | None = None
        left: int | None = None
        try:
            # The grant is for the review's model call alone: with reviews
            # off, no token check on every turn's way out.
            reviewing = self.core.settings.get_text("skills.review") == "on"
            if reviewing and token is not None and not outcome.error_kind:
                grant = authority.verify(
                    token.to_bytes(), authority.request(EXECUTOR_ROLE, session=running.session)
                )
                left = authority.remaining(grant)
            return await self.finish(
                running, outcome, policy=policy, call=call, grant=grant, left=left
            )
        except NagaError:
            log.exception("skills: after turn %s", running.id)
            return None
        finally:
            self._turns.pop(running.id, None)

    async def finish(
        self,
        running: Running,
        outcome: apb.ExecutorOutcome,
        *,
        policy: TrustPolicy,
        call: TracedCall,
        grant: Grant | None,
        left: int | None,
    ) -> Outcome | None:
        """After the turn's reply: the review (if the turn qualifies), then
        the turn's skill.turn record. The review's outcome, or None."""
        turn = self._turns.pop(running.id, None)
        if turn is None:
            return None
        ok = not outcome.error_kind and running.accepted
        result: Outcome | None = None
        review, detail = "skipped", ""
        settings = self.core.settings
        wanted = ok and grant is not None and settings.get_text("skills.review") == "on"
        tools = self._tool_records(running) if wanted else []
        if (
            wanted
            and grant is not None
            and len(tools) >= settings.get_int("skills.review_min_tools")
            and all(t.ok for t in tools)
            and (left is None or left > 0)
        ):
            trace = _trace(turn.text, outcome, tools)
            proposal = await self._review(
                running, call=call, grant=grant, left=left, trace=trace, turn=turn
            )
            store = self.library.store
            result = self.core.write(
                lambda: judge_and_write(
                    store,
                    proposal,
                    trace,
                    session=running.session,
                    peer=running.peer,
                    may_write=policy.may_write_skills,
                    threshold=settings.get_real("skills.duplicate_threshold"),
                    subject=memory_subject(running),
                )
            )
            review, detail = result.action, result.detail
            if result.name:
                detail = f"{result.scope}/{result.name}: {detail}".rstrip(": ")
        if review == "skipped" and not turn.offer.skills and not turn.viewed:
            return None  # nothing to record: no record, no sync on the turn path
        entry = self.library.turn_entry(
            running.session,
            running.id,
            (o.key for o in turn.offer.skills),
            turn.viewed,
            succeeded=ok,
            review=review,
            detail=detail,
            subject=memory_subject(running),
        )
        self.core.write(lambda: self.core.ledger.stage(entry))
        if await trio.to_thread.run_sync(self.core.settle):
            self.core.notify_appended()
        return result

    def _tool_records(self, running: Running) -> list[apb.TurnRecord]:
        """The turn's answered tool calls, from its own ledger records."""
        ledger = self.core.ledger
        ledger.commit()
        out: list[apb.TurnRecord] = []
        end = running.end_seq + 1 if running.end_seq else ledger.size
        for record in ledger.iter_records(running.message_seq, end):
            if record.kind == rec.TOOL:
                body = self.opener(record.kind, apb.TurnRecord.FromString(record.payload))
                if body.turn_id == running.id:
                    out.append(body)
        return out

    async def _review(
        self,
        running: Running,
        *,
        call: TracedCall,
        grant: Grant,
        left: int | None,
        trace: str,
        turn: TurnSkills,
    ) -> Proposal:
        offered = "".join(f"- {o.name}: {o.description}\n" for o in turn.offer.skills)
        request = mpb.ChatRequest(
            messages=[
                mpb.ChatMessage(role=mpb.ROLE_SYSTEM, content=REVIEW_PROMPT),
                mpb.ChatMessage(
                    role=mpb.ROLE_USER,
                    content=f"Skills it was offered:\n{offered or '(none)'}\n\nTrace:\n{trace}",
                ),
            ],
            tools=[
                mpb.ToolSpec(
                    name=REVIEW_TOOL,
                    description="Propose nothing, a new skill, or a patch of one",
                    parameters_json_schema=json.dumps(REVIEW_SCHEMA, separators=(",", ":")),
                )
            ],
            tool_choice=mpb.ToolChoice(mode=mpb.TOOL_CHOICE_MODE_NAMED, name=REVIEW_TOOL),
            max_tokens=1024,
        )
        reply, _ = await call(
            running, grant, left, request, kind=REVIEW_KIND, trace=apb.TurnRecord()
        )
        if reply.HasField("error"):
            return Proposal("none", reason=f"the review call failed: {reply.error.message}")
        message = reply.response.message
        for tool_call in message.tool_calls:
            if tool_call.name == REVIEW_TOOL:
                return Proposal.parse(tool_call.arguments_json)
        return Proposal.parse(message.content)


def _trace(text: str, outcome: apb.ExecutorOutcome, tools: list[apb.TurnRecord]) -> str:
    """What the turn did, as the review reads it (and as claims are checked against)."""
    parts = [f"User: {text}"]
    for t in tools:
        parts.append(f"Tool {t.tool}({t.arguments_json}) -> {t.result_json or t.error}")
    parts.append(f"Reply: {outcome.text}")
    return "\n".join(parts)[:_TRACE_CHARS]


__all__ = ["REVIEW_KIND", "SkillUse", "TurnSkills"]
