"""Tool calls that wait for the owner (docs/design/tools.md, "Approvals").

A call at or above ``tools.approve_from`` asks here before it runs: it is
pending (listed by ``naga approve list``, shown to the owner's consoles as a
card) until the owner allows or denies it, or until
``tools.approval_timeout_s`` passes, which is a deny. Every decision is a
ledger entry (an irreversible perform without world actions: it was made,
a rollback cannot unmake it). Everything here runs on the core's trio loop.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import trio

from naga.v1 import tools_pb2 as tlpb
from naga_core.errors import NagaError, NotFound
from naga_core.kernel import Kernel

T = TypeVar("T")


class Core(Protocol):
    @property
    def kernel(self) -> Kernel: ...

    def write(self, fn: Callable[[], T]) -> T: ...

    def settle(self) -> bool: ...

    def notify_appended(self) -> None: ...


class ApprovalError(NagaError):
    """Root of the approvals' errors."""


class ApprovalNotFound(ApprovalError, NotFound):
    """No pending approval by that id (decided already, timed out, never asked)."""


@dataclass(slots=True)
class _Pending:
    info: tlpb.PendingApproval
    answered: trio.Event = field(default_factory=trio.Event)
    decision: tlpb.ApprovalDecision.ValueType = tlpb.APPROVAL_DECISION_UNSPECIFIED
    seq: int = -1


#: Told of each approval asked (a console's card) and of each one settled.
Listener = Callable[[tlpb.PendingApproval, "tlpb.ApprovalDecision.ValueType"], None]


class Approvals:
    def __init__(self, core: Core, clock: Callable[[], int]) -> None:
        self._core = core
        self._clock = clock
        self._pending: dict[str, _Pending] = {}
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` for every approval asked (decision UNSPECIFIED)
        and settled from now on; returns how to stop."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def pending(self) -> list[tlpb.PendingApproval]:
        return [p.info for p in sorted(self._pending.values(), key=lambda p: p.info.asked_ns)]

    async def ask(
        self,
        *,
        session: str,
        turn_id: str,
        tool: str,
        risk: str,
        arguments_json: str,
        timeout_s: float,
        on_asked: Callable[[tlpb.PendingApproval], None] | None = None,
    ) -> tuple[tlpb.ApprovalDecision.ValueType, int]:
        """Wait for the owner's decision on one call; the decision and the
        seq of its ledger entry. ``on_asked`` hears of it first (the turn's
        stream shows the card)."""
        now = self._clock()
        info = tlpb.PendingApproval(
            id="ap-" + secrets.token_hex(6),
            session=session,
            turn_id=turn_id,
            tool=tool,
            risk=risk,
            arguments_json=arguments_json,
            asked_ns=now,
            expires_ns=now + int(timeout_s * 1e9),
        )
        pending = _Pending(info)
        self._pending[info.id] = pending
        if on_asked is not None:
            on_asked(info)
        self._tell(info, tlpb.APPROVAL_DECISION_UNSPECIFIED)
        try:
            with trio.move_on_after(timeout_s):
                await pending.answered.wait()
        finally:
            self._pending.pop(info.id, None)
        if pending.decision == tlpb.APPROVAL_DECISION_UNSPECIFIED:
            pending.decision = tlpb.APPROVAL_DECISION_TIMEOUT
            pending.seq = self._journal(pending, f"no answer within {timeout_s:g} s: denied")
            await self._settle()
            self._tell(info, pending.decision)
        return pending.decision, pending.seq

    def decide(self, approval_id: str, allow: bool) -> int:
        """The owner's answer; the seq of its ledger entry (staged: the
        caller's settle makes it durable before it answers)."""
        pending = self._pending.get(approval_id)
        if pending is None or pending.answered.is_set():
            raise ApprovalNotFound(
                f"no pending approval {approval_id!r} (decided already, timed out, or never asked)"
            )
        pending.decision = tlpb.APPROVAL_DECISION_ALLOW if allow else tlpb.APPROVAL_DECISION_DENY
        pending.seq = self._journal(
            pending, "allowed by the owner" if allow else "denied by the owner"
        )
        pending.answered.set()
        self._tell(pending.info, pending.decision)
        return pending.seq

    def _journal(self, pending: _Pending, what: str) -> int:
        info = pending.info
        # The arguments are the subject's words: named by digest here, in the
        # clear only in the turn's sealed tool_call record (docs/adr/0037).
        raw = info.arguments_json.encode()
        text = (
            f"approval {info.id}: {info.tool} ({info.risk}) in turn {info.turn_id} of session "
            f"{info.session}, arguments of {len(raw)} bytes (sha256 "
            f"{hashlib.sha256(raw).hexdigest()[:16]}): {what}"
        )
        return self._core.write(lambda: self._core.kernel.perform([], None, description=text))

    async def _settle(self) -> None:
        if await trio.to_thread.run_sync(self._core.settle):
            self._core.notify_appended()

    def _tell(self, info: tlpb.PendingApproval, decision: tlpb.ApprovalDecision.ValueType) -> None:
        for listener in list(self._listeners):
            listener(info, decision)


__all__ = ["ApprovalError", "ApprovalNotFound", "Approvals", "Listener"]
