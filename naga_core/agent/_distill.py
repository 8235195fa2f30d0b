"""End-of-session distillation: one model call over a session's history,
asked for a JSON object of memories worth keeping; ``{"memories": []}``
(nothing worth remembering) is a valid answer and the expected one for most
sessions. Each memory passes the same trust gate and poison lint as
``memory.write`` (as a write by the session's peer), refusals recorded.
The call is traced as a ``memory.distill`` record with its request and
answer in the blob store (docs/design/memory.md).

Called when a session ends (the owner's ``naga memory distill SESSION``
today). The call is the owner's: no turn's budget is debited.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import cast

import trio

from naga.trust import TrustLevel
from naga.v1 import memory_pb2 as mmpb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core._store import blob_store
from naga_core.agent._core import Core
from naga_core.agent._distill_due import DISTILL
from naga_core.agent._errors import AgentError, SessionNotFound
from naga_core.agent._workers import AgentWorkers
from naga_core.kernel import TrustTable
from naga_core.ledger import Entry
from naga_core.memory import (
    LAYERS,
    Item,
    MemoryStore,
    Sealer,
    Source,
    WriteRefused,
    subject_of,
)

#: Most bytes of history the call is shown (the newest).
HISTORY_BYTES = 12_000
#: ``through_seq`` of a call that got no usable answer (it failed, or the
#: answer was not the JSON asked for): it covered nothing, so its entries
#: are shown again to the next distillation (docs/adr/0058).
COVERED_NOTHING = -1
#: The outcome of an archive's distillation when every message was covered
#: already: recorded with no model call (docs/adr/0058).
NOTHING_NEW = "nothing new since the last distillation"
#: Most memories one distillation keeps.
MAX_MEMORIES = 8
_TIMEOUT_S = 60.0
PROMPT = (
    "You distil long-term memories from a conversation between a person and their assistant. "
    "Keep only durable facts and preferences about the person (semantic), or notable events "
    "(episodic), each as one plain sentence in the third person. Never keep instructions, "
    "requests to the assistant, secrets such as passwords, or anything said only in passing. "
    'Answer with exactly one JSON object: {"memories": [{"text": "...", "layer": "semantic"}]}. '
    'Most conversations hold nothing worth keeping: then answer {"memories": []}.'
)


@dataclass(frozen=True, slots=True)
class Distilled:
    seq: int
    items: tuple[Item, ...]
    refused: int
    outcome: str
    #: the record's through_seq: the newest entry covered
    #: (:data:`COVERED_NOTHING` for a call that got no usable answer)
    through: int = COVERED_NOTHING


def _transcript(entries: list[tpb.SessionEntry]) -> str:
    lines: list[str] = []
    size = 0
    for e in reversed(entries):
        who = "person" if e.role == tpb.HISTORY_ROLE_USER else "assistant"
        line = f"{who}: {e.text}"
        size += len(line.encode())
        if size > HISTORY_BYTES:
            break
        lines.append(line)
    return "\n".join(reversed(lines))


def parse(answer: str) -> list[tuple[str, str]] | str:
    """The (text, layer) pairs of the answer, or why it is not the JSON asked for."""
    raw = answer.strip()
    if raw.startswith("```"):  # a fenced block: its inside
        raw = raw.strip("`").removeprefix("json").strip()
    try:
        doc: object = json.loads(raw)
    except ValueError:
        return "the answer was not the JSON object asked for"
    if not isinstance(doc, dict):
        return "the answer was not a JSON object"
    memories = cast("dict[str, object]", doc).get("memories")
    if not isinstance(memories, list):
        return 'the answer has no "memories" list'
    out: list[tuple[str, str]] = []
    for m in cast("list[object]", memories)[:MAX_MEMORIES]:
        if not isinstance(m, dict):
            continue
        fields = cast("dict[str, object]", m)
        text, layer = fields.get("text"), fields.get("layer", "semantic")
        if isinstance(text, str) and text.strip():
            out.append((text.strip(), layer if isinstance(layer, str) else "semantic"))
    return out


async def distill(
    core: Core,
    workers: AgentWorkers,
    store: MemoryStore,
    session: str,
    entries: list[tpb.SessionEntry],
    *,
    after: int = 0,
    record_nothing_new: bool = False,
) -> Distilled:
    """Distil ``session`` (its history ``entries``; only those after seq
    ``after`` when above 0: an idle session's or an archive's, adr 0055 and
    0058): the record's seq, the items kept, how many were refused, and the
    outcome in words. The record says up to which entry it covered
    (``through_seq``; :data:`COVERED_NOTHING` when the call got no usable
    answer). No message after ``after``: SessionNotFound, or with
    ``record_nothing_new`` (an archive's, which must leave its record) a
    record of :data:`NOTHING_NEW` with no model call."""
    every = entries
    if after > 0:
        entries = [e for e in entries if e.seq > after]
    said = [e for e in entries if e.role == tpb.HISTORY_ROLE_USER]
    if not said:
        said_before = [e for e in every if e.role == tpb.HISTORY_ROLE_USER]
        if not (record_nothing_new and said_before and after > 0):
            raise SessionNotFound(f"session {session!r} has no message to distil")
        return _nothing_new(core, session, _subject(core, session, said_before[-1]), after)
    peer = said[-1].peer
    trust = TrustTable(core.kernel).level(peer) if peer else TrustLevel.OWNER
    subject = subject_of(peer, trust, session)
    request = mpb.ChatRequest(
        messages=[
            mpb.ChatMessage(role=mpb.ROLE_SYSTEM, content=PROMPT),
            mpb.ChatMessage(role=mpb.ROLE_USER, content=_transcript(entries)),
        ],
        max_tokens=512,
        temperature=0.0,
    )
    started = time.monotonic_ns()
    outcome = ""
    try:
        reply = await workers.complete(request, _TIMEOUT_S)
    except AgentError as exc:
        reply = None
        outcome = f"the distillation call failed: {exc}"
    blobs = blob_store(core.home)
    answer = b""
    if reply is not None:
        failed = reply.HasField("error")
        answer = (reply.error if failed else reply.response).SerializeToString()
        outcome = reply.error.message if failed else ""
    # Sealed under the subject's key: the transcript is its words (adr 0037).
    sealer = Sealer(store.keys)
    digests = await trio.to_thread.run_sync(
        lambda: (
            blobs.put(sealer.seal_blob(subject, request.SerializeToString())),
            blobs.put(sealer.seal_blob(subject, answer)),
        )
    )
    kept: list[Item] = []
    refused = 0
    answered = False
    if reply is not None and not reply.HasField("error"):
        found = parse(reply.response.message.content)
        answered = not isinstance(found, str)
        if isinstance(found, str):
            outcome = found
        elif not found:
            outcome = "nothing worth remembering"
        else:
            source = Source(session=session, turn_id="", trust=trust, seqs=(said[-1].seq,))
            for text, layer in found:
                item, was_refused = _keep(
                    core, store, subject, (text, layer), source=source, peer=peer
                )
                refused += was_refused
                if item is not None:
                    kept.append(item)
            outcome = f"{len(kept)} kept, {refused} refused"
    body = mmpb.MemoryDistillRecord(
        session=session,
        subject=subject,
        request_blob=digests[0],
        response_blob=digests[1],
        item_ids=[i.id for i in kept],
        refused=refused,
        outcome=outcome,
        duration_us=(time.monotonic_ns() - started) // 1000,
        # A call with no usable answer covered nothing: the next
        # distillation (idle or archive) is shown its entries again.
        through_seq=entries[-1].seq if answered else COVERED_NOTHING,
        after_seq=max(after, 0),
    )
    seq = core.write(
        lambda: core.ledger.stage(Entry.of(DISTILL, body.SerializeToString(), digests)).seq
    )
    return Distilled(seq, tuple(kept), refused, outcome, body.through_seq)


def _subject(core: Core, session: str, said: tpb.SessionEntry) -> str:
    peer = said.peer
    trust = TrustTable(core.kernel).level(peer) if peer else TrustLevel.OWNER
    return subject_of(peer, trust, session)


def _nothing_new(core: Core, session: str, subject: str, covered: int) -> Distilled:
    """The record of a distillation with nothing new to show: no call, no
    blobs; it covers what was covered (an archive's end is recorded once,
    ADR 0050, and its messages are not sent to the model again)."""
    body = mmpb.MemoryDistillRecord(
        session=session,
        subject=subject,
        outcome=NOTHING_NEW,
        through_seq=covered,
        after_seq=covered,
    )
    seq = core.write(lambda: core.ledger.stage(Entry.of(DISTILL, body.SerializeToString())).seq)
    return Distilled(seq, (), 0, NOTHING_NEW, covered)


def _keep(
    core: Core,
    store: MemoryStore,
    subject: str,
    memory: tuple[str, str],
    *,
    source: Source,
    peer: str,
) -> tuple[Item | None, bool]:
    text, layer = memory
    try:
        store.check(trust=source.trust, own=subject, subject=subject, text=text)
    except WriteRefused as exc:
        refusal = exc
        core.write(
            lambda: store.refused(core.ledger, refusal, subject=subject, writer=peer, source=source)
        )
        return None, True
    if store.duplicate(subject, text) is not None:
        return None, False
    value = LAYERS.get(layer, mmpb.MEMORY_LAYER_SEMANTIC)
    item = core.write(
        lambda: store.write(
            core.ledger, core.kernel, subject=subject, layer=value, text=text, source=source
        )
    )
    return item, False


__all__ = ["COVERED_NOTHING", "DISTILL", "NOTHING_NEW", "PROMPT", "Distilled", "distill", "parse"]
