"""Tools the core answers itself, added by a part of the core above the
agent (the scheduler's ``job.create``): offered to a turn beside its
plugins' tools when the turn's risk ceiling reaches theirs and they say
they are for the turn, called through the same ToolService.Call, durable
intent first (a crash never runs one twice), traced like any tool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import model_pb2 as mpb
from naga_core.agent._turn import Running


@dataclass(frozen=True, slots=True)
class TurnView:
    """What a core tool may know of the turn that calls it."""

    session: str
    turn_id: str
    peer: str
    trust: TrustLevel
    risk: Risk

    @classmethod
    def of(cls, running: Running) -> TurnView:
        return cls(running.session, running.id, running.peer, running.trust, running.risk)


@dataclass(frozen=True, slots=True)
class CoreToolAnswer:
    ok: bool
    result_json: str = ""
    error: str = ""


class CoreTool(Protocol):
    @property
    def name(self) -> str:
        """Its name (``job.create``)."""
        ...

    @property
    def risk(self) -> Risk: ...

    @property
    def spec(self) -> mpb.ToolSpec:
        """As the model sees it ('.' written '__')."""
        ...

    def refusal(self, turn: TurnView) -> str | None:
        """Why ``turn`` may not have it (then it is not offered), or None."""
        ...

    async def call(self, turn: TurnView, arguments_json: str) -> CoreToolAnswer: ...


class CoreTools:
    """The core tools by name; the agent offers and answers them."""

    def __init__(self) -> None:
        self._tools: dict[str, CoreTool] = {}

    def add(self, tool: CoreTool) -> None:
        self._tools[tool.name] = tool

    def get(self, name: str) -> CoreTool | None:
        return self._tools.get(name)

    def why_not(
        self, tool: CoreTool, turn: TurnView, allowed: frozenset[str] | None = None
    ) -> str | None:
        """Why ``turn`` may not call ``tool`` (told to the model), or None;
        ``allowed``: the turn token's tool list, if it has one."""
        # The tool's own reason first: it says the most.
        own = tool.refusal(turn)
        if own is not None:
            return own
        if tool.risk > turn.risk:
            return (
                f"tool {tool.name} is not allowed in this session: its risk {tool.risk.name} is "
                f"above the session's ceiling {turn.risk.name}; answer without it"
            )
        if allowed is not None and tool.name not in allowed:
            return f"tool {tool.name} is not available in this session; answer without it"
        return None

    def _for(self, running: Running) -> list[CoreTool]:
        turn = TurnView.of(running)
        return [t for _, t in sorted(self._tools.items()) if self.why_not(t, turn) is None]

    def offered(self, running: Running) -> list[mpb.ToolSpec]:
        """As the model is shown them."""
        return [t.spec for t in self._for(running)]

    def names(self, running: Running) -> list[str]:
        """As the turn's token lists them (what it may call, no more)."""
        return [t.name for t in self._for(running)]


__all__ = ["CoreTool", "CoreToolAnswer", "CoreTools", "TurnView"]
