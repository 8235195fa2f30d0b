"""At start: the turns a stopped core left without an end, and what to do
with each (docs/design/recovery.md, docs/adr/0033-recover13-tool-undo.md).

A turn is open when its ``turn.message`` is in the ledger and neither a
``turn.reply`` nor a ``turn.error`` followed. The message may have been
acknowledged, so the turn must end, with one reply or one recorded error:

* not re-run before, and every tool call in flight at the stop (an intent
  record, no answer) one that may run again (R0, declared ``repeatable``, a
  captured workspace write whose effect is undone first by the kernel's
  inverse, the core's reads and ``memory.write``: naga_core.agent._rewind):
  it is resumed from its recorded steps (docs/adr/0042-recover13b-resume.md):
  the model's answers and the tools' results go back into its context, a
  call with a recorded answer never runs again, and the model is asked
  again only for the step it was in (at most once more, because a
  ``turn.resumed`` record is made durable before the re-run, and a turn
  seen resumed at a later start is not run a third time);
* a call in flight whose effect Naga can neither undo nor repeat: it ends
  with a recorded error (kind INTERRUPTED) naming the call, so that tool
  never runs twice;
* already resumed once: it ends with a recorded error too.

The start itself becomes one kernel note (``naga history``): that the core
had stopped without a clean stop, what the open cleaned, which turns were
interrupted and what this start does with each; each re-run turn's end is a
note of its own when it comes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import _sessions as rec
from naga_core.ledger import Record

#: A recovery re-run of an open turn; durable before the re-run starts.
RESUMED = "turn.resumed"
#: A tool call about to run (durable before it runs).
TOOL_CALL = "turn.tool_call"
#: A tool call's workspace capture about to be journaled: staged in the
#: same write as its effect, right before it (so the effect is the next
#: record), naming the effect's two change sets as its blobs.
TOOL_EFFECT = "turn.tool_effect"
#: Turns named one by one in the start's note; the rest are counted.
_NAMED = 20


@dataclass(slots=True)
class OpenCall:
    """A tool call an open turn started."""

    call_id: str
    tool: str
    #: seqs of its ``turn.tool_effect`` records
    links: list[int] = field(default_factory=list[int])
    #: its ``turn.tool`` record is durable: a re-run replays the answer
    answered: bool = False


@dataclass(slots=True)
class OpenTurn:
    """A turn with a message and no end, as the ledger holds it."""

    session: str
    turn_id: str
    key: str
    peer: str
    text: str
    trust: str
    risk: int
    message_seq: int
    #: its naga.v1.QueueMode if it was queued behind a running turn, else 0
    mode: int = 0
    #: the images of its message (references)
    images: list[mpb.ImagePart] = field(default_factory=list[mpb.ImagePart])
    steering: list[str] = field(default_factory=list[str])
    model_calls: int = 0
    #: the call ids of tool calls that started (or, in a ledger older than
    #: ``turn.tool_call``, that answered)
    tools: set[str] = field(default_factory=set[str])
    resumed: int = 0
    #: the calls in ``tools`` with their tool (absent for a call known only
    #: from an older start-up image)
    calls: dict[str, OpenCall] = field(default_factory=dict[str, OpenCall])
    #: what this start undid before re-running it, for its note
    undone: list[str] = field(default_factory=list[str])
    #: seqs of its recorded steps in order: each answered model call
    #: (``turn.model``, not failed) and each tool result (``turn.tool``)
    steps: list[int] = field(default_factory=list[int])
    #: the steps as the model saw them, read back before a re-run
    #: (naga_core.agent._sealing.reopen_turns): the resumed context
    replay: list[mpb.ChatMessage] = field(default_factory=list[mpb.ChatMessage])
    #: results stored whole as blobs (call id -> digest, bytes), for turn.read_result
    stored: dict[str, tuple[bytes, int]] = field(default_factory=dict[str, tuple[bytes, int]])
    #: why its steps could not be read back (it is then not re-run)
    unreadable: str = ""

    @property
    def pending(self) -> list[OpenCall]:
        """The calls that started and whose answer is not recorded: the ones
        a re-run runs again (the answered ones are replayed)."""
        return [c for c in self.calls.values() if not c.answered]

    @property
    def tool_calls(self) -> int:
        return len(self.tools)

    def why_resumed(self) -> str | None:
        """The error a turn re-run once already ends with; None if it was not."""
        if self.resumed:
            return (
                "the core stopped during this turn, and again while the next start re-ran it; "
                "it is not run a third time: send the message again to go on"
            )
        return None

    def started(self, call_id: str, tool: str) -> OpenCall:
        """The call ``call_id`` of ``tool``, noted as started."""
        self.tools.add(call_id)
        call = self.calls.get(call_id)
        if call is None:
            call = self.calls[call_id] = OpenCall(call_id, tool)
        return call


class OpenTurns:
    """Fed every record at start (one pass with the sessions' rebuild)."""

    def __init__(self) -> None:
        self._open: dict[str, OpenTurn] = {}

    def see(self, record: Record) -> None:
        kind = record.kind
        if kind not in rec.KINDS and kind not in (RESUMED, TOOL_CALL, TOOL_EFFECT):
            return
        try:
            body = apb.TurnRecord.FromString(record.payload)
        except DecodeError:
            return  # not ours to judge: `naga ledger verify` checks records
        if kind == rec.MESSAGE:
            self._open[body.turn_id] = OpenTurn(
                session=body.session,
                turn_id=body.turn_id,
                key=body.idempotency_key,
                peer=body.peer,
                text=body.text,
                trust=body.trust,
                risk=body.risk_ceiling,
                message_seq=record.seq,
                mode=body.queue_mode,
                images=list(body.images),
            )
            return
        turn = self._open.get(body.turn_id)
        if turn is None:
            return
        if kind in (rec.REPLY, rec.ERROR):
            del self._open[body.turn_id]
        elif kind == rec.STEER:
            turn.steering.append(body.text)
        elif kind == rec.MODEL:
            turn.model_calls += 1
            if not body.failed:
                turn.steps.append(record.seq)
        elif kind == rec.TOOL:
            turn.steps.append(record.seq)
            # A refused call had no intent record: nothing ran.
            if body.ok or (body.call_id and body.call_id in turn.calls):
                turn.started(body.call_id or f"seq-{record.seq}", body.tool).answered = True
        elif kind == TOOL_CALL:
            turn.started(body.call_id or f"seq-{record.seq}", body.tool)
        elif kind == TOOL_EFFECT:
            call = turn.started(body.call_id or f"seq-{record.seq}", body.tool)
            call.links.append(record.seq)
        elif kind == RESUMED:
            turn.resumed += 1

    def add(self, turn: OpenTurn) -> None:
        """An open turn restored from a start-up image."""
        self._open[turn.turn_id] = turn

    def found(self) -> list[OpenTurn]:
        """The open turns, oldest message first."""
        return sorted(self._open.values(), key=lambda t: t.message_seq)


def ended_record(turn: OpenTurn, why: str) -> apb.TurnRecord:
    """The ``turn.error`` that ends an open turn this start does not re-run."""
    return apb.TurnRecord(
        session=turn.session,
        turn_id=turn.turn_id,
        error_kind=tpb.TURN_ERROR_KIND_INTERRUPTED,
        error_message=why,
        model_calls=turn.model_calls,
        tool_calls=turn.tool_calls,
        message_seq=turn.message_seq,
    )


def resumed_record(turn: OpenTurn) -> apb.TurnRecord:
    return apb.TurnRecord(
        session=turn.session,
        turn_id=turn.turn_id,
        message_seq=turn.message_seq,
        text="re-run by the start after the core stopped",
    )


def start_note(
    *, crashed: bool, cleaned: list[str], plan: list[tuple[OpenTurn, str | None]]
) -> str | None:
    """The start's entry in the kernel's history, or None for a clean start
    with nothing to say."""
    if not crashed and not cleaned and not plan:
        return None
    head = (
        "core started after it had stopped without a clean stop"
        if crashed
        else "core started with turns left open by its last stop"
        if plan
        else "core started and cleaned what its last stop left"
    )
    parts = [head]
    if cleaned:
        parts.append("cleaned: " + "; ".join(cleaned))
    if plan:
        parts.append(f"{len(plan)} turn(s) interrupted")
        for turn, why in plan[:_NAMED]:
            if why is not None:
                fate = f"ended with an error ({why})"
            elif turn.undone:
                fate = "re-run after undoing " + ", ".join(turn.undone)
            else:
                fate = "re-run"
            where = f"session {turn.session}, seq {turn.message_seq}"
            parts.append(f"turn {turn.turn_id} ({where}): {fate}")
        if len(plan) > _NAMED:
            parts.append(f"and {len(plan) - _NAMED} more")
    return "; ".join(parts)


def end_note(turn_id: str, session: str, seq: int, error: str) -> str:
    """The note a re-run turn's end leaves."""
    how = f"answered (reply seq {seq})" if not error else f"ended with an error: {error}"
    return f"recovered turn {turn_id} (session {session}): {how}"


__all__ = [
    "RESUMED",
    "TOOL_CALL",
    "TOOL_EFFECT",
    "OpenCall",
    "OpenTurn",
    "OpenTurns",
    "end_note",
    "ended_record",
    "resumed_record",
    "start_note",
]
