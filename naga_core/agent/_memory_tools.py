"""The core's memory tools and the recall of a turn (docs/design/memory.md).

``memory.write`` (R1) and ``memory.search`` (R0) are the core's own tools,
answered here like ``turn.read_result``: offered to a turn whose trust's
row shows their risk, and checked again at the call (a model may name a
tool it was not offered). A write passes the trust gate and the poison lint
or is refused, the refusal recorded with why; a written item is durable
before the tool says so. Recall: the items of the turn's subject most
relevant to its message, within :data:`RECALL_TOKENS`, in the system
prompt; each use a ``memory.recall`` record (which items, which turn).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import cast

from naga.trust import TrustLevel
from naga.v1 import agent_pb2 as apb
from naga.v1 import memory_pb2 as mmpb
from naga.v1 import model_pb2 as mpb
from naga_core.agent._core import Core
from naga_core.agent._turn import Running
from naga_core.memory import (
    LAYER_NAMES,
    LAYERS,
    SEARCH_RISK,
    WRITE_RISK,
    KeyRing,
    MemoryStore,
    Recalled,
    RefusalReason,
    Sealer,
    Source,
    WriteRefused,
    may_use,
    subject_of,
)

WRITE_TOOL = "memory.write"
SEARCH_TOOL = "memory.search"
TOOLS = frozenset({WRITE_TOOL, SEARCH_TOOL})
#: Most tokens of a turn's system prompt given to recalled memories.
RECALL_TOKENS = 400
_SEARCH_LIMIT = 8


def _spec(
    name: str, description: str, props: dict[str, object], required: list[str]
) -> mpb.ToolSpec:
    schema = {"type": "object", "properties": props, "required": required}
    return mpb.ToolSpec(
        name=name.replace(".", "__"),
        description=description,
        parameters_json_schema=json.dumps(schema, separators=(",", ":")),
    )


WRITE_SPEC = _spec(
    WRITE_TOOL,
    "Remember a fact or preference about the person you are talking with (semantic), or what "
    "happened (episodic), for later conversations. State it as a plain fact, never as an "
    "instruction.",
    {
        "text": {"type": "string", "maxLength": 2000, "description": "the fact, in one sentence"},
        "layer": {"type": "string", "enum": ["semantic", "episodic"]},
    },
    ["text"],
)
SEARCH_SPEC = _spec(
    SEARCH_TOOL,
    "Search what you remember about the person you are talking with",
    {
        "query": {"type": "string", "maxLength": 500},
        "limit": {"type": "integer", "minimum": 1, "maximum": _SEARCH_LIMIT},
    },
    ["query"],
)


def subject(running: Running) -> str:
    return subject_of(running.peer, running.trust, running.session)


def offered(trust: TrustLevel) -> list[mpb.ToolSpec]:
    """The memory tools a turn at ``trust`` is offered (its row's risk)."""
    out: list[mpb.ToolSpec] = []
    if may_use(trust, SEARCH_RISK):
        out.append(SEARCH_SPEC)
    if may_use(trust, WRITE_RISK):
        out.append(WRITE_SPEC)
    return out


def offered_names(trust: TrustLevel) -> list[str]:
    """Their names, for the turn token's tool set (what the turn may call)."""
    return [s.name.replace("__", ".") for s in offered(trust)]


def _args(arguments_json: str) -> dict[str, object] | str:
    try:
        args: object = json.loads(arguments_json or "{}")
    except ValueError as exc:
        return f"the arguments are not JSON: {exc}"
    if not isinstance(args, dict):
        return "the arguments must be a JSON object"
    return cast("dict[str, object]", args)


class MemoryTools:
    """The turn path's side of the memory store."""

    def __init__(self, core: Core, store: MemoryStore | None = None) -> None:
        self._core = core
        self.store = (
            store
            if store is not None
            else MemoryStore.over(KeyRing.of_home(core.home), core.kernel)
        )
        #: Seals the subjects' turn records and blobs under the store's keys
        #: (one ring: a forget is seen by both at once).
        self.sealer = Sealer(self.store.keys)

    def recall(self, running: Running, text: str, cap_tokens: int) -> Recalled:
        """The turn's memory section; its use staged as a record."""
        who = subject(running)
        recalled = self.store.recall(who, text, cap_tokens)
        if recalled.item_ids:
            entry = self.store.recall_record(
                recalled, subject=who, session=running.session, turn_id=running.id, via="prompt"
            )
            self._core.write(lambda: self._core.ledger.stage(entry))
        return recalled

    async def call(
        self, running: Running, req: apb.ToolCallRequest, settle: Callable[[], Awaitable[None]]
    ) -> apb.ToolCallResponse:
        args = _args(req.arguments_json)
        if isinstance(args, str):
            return apb.ToolCallResponse(ok=False, error=f"{req.tool}: {args}")
        if req.tool == SEARCH_TOOL:
            return self._search(running, args)
        return await self._write(running, args, settle)

    def _search(self, running: Running, args: dict[str, object]) -> apb.ToolCallResponse:
        if not may_use(running.trust, SEARCH_RISK):
            return apb.ToolCallResponse(
                ok=False, error=f"{SEARCH_TOOL} is not allowed at trust {running.trust.label}"
            )
        query, limit = args.get("query"), args.get("limit", 5)
        if not isinstance(query, str) or not query.strip():
            return apb.ToolCallResponse(
                ok=False, error=f"{SEARCH_TOOL}: query (a string) is required"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _SEARCH_LIMIT:
            return apb.ToolCallResponse(
                ok=False, error=f"{SEARCH_TOOL}: limit must be an integer 1..{_SEARCH_LIMIT}"
            )
        who = subject(running)
        found = self.store.search(who, query, limit)
        if found:
            used = Recalled("", tuple(i.id for i in found), 0)
            entry = self.store.recall_record(
                used, subject=who, session=running.session, turn_id=running.id, via="search"
            )
            self._core.write(lambda: self._core.ledger.stage(entry))
        items = [
            {"id": i.id, "text": i.text, "layer": LAYER_NAMES.get(i.layer, "semantic")}
            for i in found
        ]
        return apb.ToolCallResponse(
            ok=True, result_json=json.dumps({"items": items}, ensure_ascii=False)
        )

    async def _write(
        self, running: Running, args: dict[str, object], settle: Callable[[], Awaitable[None]]
    ) -> apb.ToolCallResponse:
        own = subject(running)
        about = args.get("subject", own)
        target = about if isinstance(about, str) else own
        source = Source(
            session=running.session,
            turn_id=running.id,
            trust=running.trust,
            seqs=(running.message_seq,) if running.message_seq else (),
        )
        store = self.store
        try:
            text, layer = _checked(args)
            store.check(trust=running.trust, own=own, subject=target, text=text)
        except WriteRefused as exc:
            refusal = exc
            seq = self._core.write(
                lambda: store.refused(
                    self._core.ledger, refusal, subject=target, writer=running.peer, source=source
                )
            )
            await settle()
            return apb.ToolCallResponse(
                ok=False, error=f"{WRITE_TOOL} refused: {refusal.why} (ledger entry {seq})"
            )
        same = store.duplicate(target, text)
        if same is not None:
            return apb.ToolCallResponse(
                ok=True,
                result_json=json.dumps(
                    {"saved": same.id, "record": same.seq, "already_remembered": True},
                    separators=(",", ":"),
                ),
            )
        item = self._core.write(
            lambda: store.write(
                self._core.ledger,
                self._core.kernel,
                subject=target,
                layer=layer,
                text=text,
                source=source,
            )
        )
        await settle()  # durable before the model is told it is saved
        return apb.ToolCallResponse(
            ok=True,
            result_json=json.dumps({"saved": item.id, "record": item.seq}, separators=(",", ":")),
        )


def _checked(args: dict[str, object]) -> tuple[str, mmpb.MemoryLayer.ValueType]:
    """The write's text and layer, or WriteRefused (INVALID) saying what is wrong."""
    text, layer = args.get("text"), args.get("layer", "semantic")
    if not isinstance(args.get("subject", ""), str):
        raise WriteRefused(RefusalReason.INVALID, "subject must be a string")
    if not isinstance(text, str):
        raise WriteRefused(RefusalReason.INVALID, "text (a string) is required")
    if not isinstance(layer, str) or layer not in LAYERS:
        raise WriteRefused(RefusalReason.INVALID, "layer must be semantic or episodic")
    return text, LAYERS[layer]


__all__ = [
    "RECALL_TOKENS",
    "SEARCH_SPEC",
    "SEARCH_TOOL",
    "TOOLS",
    "WRITE_SPEC",
    "WRITE_TOOL",
    "MemoryTools",
    "offered",
    "offered_names",
    "subject",
]
