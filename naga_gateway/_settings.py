"""The lanes' setting, learned from the core and followed live.

``lanes.queue_mode`` (the mode of a message that names none) is the core's
setting; the gateway reads it with ``GetSetting`` at start and again whenever a kernel
effect that may change it becomes durable (one that writes it, a rollback,
an abort), seen through a ledger ``Subscribe`` stream from the head that
the core filters to those effects (a turn's budget debit, a kernel effect
too, is not sent: docs/adr/0043, 0054). A change applies
to what is sent after the gateway saw it (``lanes.max_concurrent``, the cap
on running turns, is the core's alone: docs/adr/0028).
:meth:`LaneSettings.wait_applied` says when a given ledger seq has been
taken into account.

If the core cannot tell (an old core, a refusal), the gateway keeps the
values it has (at first, its :class:`GatewayConfig`'s) and says so in its log;
a broken stream is followed again after a short backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio
from google.protobuf.message import DecodeError

from naga.constants import KERNEL_EFFECT_KIND, KERNEL_SETTING_FAMILY
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import ledger_pb2 as lpb
from naga_gateway._core import CorePort
from naga_gateway._lanes import Lanes, Mode
from naga_gateway.errors import CoreCallFailed

_log = logging.getLogger("naga.gateway")

QUEUE_MODE = "lanes.queue_mode"
#: The ledger kind of a kernel effect (naga_core.kernel's EFFECT_KIND; a
#: test keeps the two equal, the gateway may not import the core).
_MODES: dict[str, Mode] = {
    "followup": "followup",
    "collect": "collect",
    "steer": "steer",
    "interrupt": "interrupt",
}
_RETRY_S = (0.2, 1.0, 5.0)


class LaneSettings:
    """Follows the core's lanes settings into ``lanes``; :meth:`follow` in a nursery."""

    def __init__(self, core: CorePort, lanes: Lanes) -> None:
        self._core = core
        self._lanes = lanes
        #: Every record below this seq has been taken into account (0: none yet).
        self.applied_next_seq = 0
        self._advanced = trio.Event()

    async def follow(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read the settings, then follow changes until cancelled. Started
        after the first reading, whether or not the core answered it."""
        started = False

        def ready() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        failures = 0
        while True:
            try:
                await self._follow_once(ready)
                failures = 0  # the core ended the stream (it is stopping)
            except CoreCallFailed as exc:
                if exc.final:  # the core answered for good: following again cannot help
                    _log.warning("lanes settings not learned from the core, kept: %s", exc)
                    ready()
                    return
                _log.warning("following the lanes settings: %s; again shortly", exc)
                failures += 1
            ready()
            await trio.sleep(_RETRY_S[min(failures, len(_RETRY_S) - 1)])

    async def _follow_once(self, ready: Callable[[], None]) -> None:
        size = await self._core.ledger_size()
        fresh = True

        async def on_event(event: lpb.SubscribeEvent) -> None:
            nonlocal fresh
            if event.HasField("record"):
                fresh = fresh or _may_change_mode(event.record)
            elif event.HasField("caught_up"):
                if fresh:
                    await self._apply()
                    fresh = False
                self._advance(event.caught_up.next_seq)
                ready()

        # Only settings effects (and rollbacks and aborts), and CaughtUp only
        # after them: a turn's budget debits never reach the gateway, which
        # would otherwise wake at every commit of every turn.
        request = lpb.SubscribeRequest(
            from_seq=size,
            kinds=[KERNEL_EFFECT_KIND],
            effect_families=[KERNEL_SETTING_FAMILY],
            caught_up_after_records=True,
        )
        await self._core.subscribe(request, on_event)

    async def _apply(self) -> None:
        mode = await self._core.setting(QUEUE_MODE)
        default_mode = _MODES.get(mode.value.text, self._lanes.default_mode)
        if default_mode != self._lanes.default_mode:
            _log.info("lanes: default mode %s", default_mode)
        self._lanes.configure(default_mode=default_mode)

    def _advance(self, next_seq: int) -> None:
        if next_seq > self.applied_next_seq:
            self.applied_next_seq = next_seq
            self._advanced.set()
            self._advanced = trio.Event()

    async def wait_applied(self, seq: int) -> None:
        """Return once the record ``seq`` (and every one before it) has been
        taken into account."""
        while self.applied_next_seq <= seq:
            await self._advanced.wait()


def _may_change_mode(record: lpb.Record) -> bool:
    """Whether a kernel effect may have changed ``lanes.queue_mode``: it
    writes it, or it is a rollback or an abort (they restore what they
    undo). One that cannot be read counts as a change."""
    try:
        effect = kpb.Effect.FromString(record.payload)
    except DecodeError:
        return True
    if effect.form in (kpb.EFFECT_FORM_ROLLBACK, kpb.EFFECT_FORM_ABORT):
        return True
    return any(
        op.family == KERNEL_SETTING_FAMILY and op.key == QUEUE_MODE
        for op in (*effect.forward, *effect.inverse)
    )


__all__ = ["KERNEL_EFFECT_KIND", "QUEUE_MODE", "LaneSettings"]
