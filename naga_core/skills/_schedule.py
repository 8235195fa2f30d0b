"""The curator on an idle-time schedule (``skills.curate_every_h``; 0, the
default, is off): every so many hours, once no turn runs, one curation
(naga_core.skills._curate), each action an effect like the command's."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

import trio

from naga_core.errors import NagaError
from naga_core.kernel import Settings
from naga_core.skills._curate import apply, plan
from naga_core.skills._library import Library

log = logging.getLogger("naga.skills")
#: How often an off schedule looks at its setting again, and how often a
#: due run looks for an idle moment (seconds).
RECHECK_S = 600.0
IDLE_POLL_S = 30.0


async def curate_when_idle(
    library: Library,
    settings: Settings,
    write: Callable[[Callable[[], int]], int],
    settle: Callable[[], Awaitable[None]],
    idle: Callable[[], bool],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run until cancelled; ``idle`` says whether no turn runs now."""
    task_status.started()
    last = trio.current_time()
    while True:
        hours = settings.get_int("skills.curate_every_h")
        if hours <= 0:
            await trio.sleep(RECHECK_S)
            last = trio.current_time()
            continue
        due = last + hours * 3600.0
        if trio.current_time() < due:
            await trio.sleep(min(RECHECK_S, due - trio.current_time()))
            continue
        if not idle():
            await trio.sleep(IDLE_POLL_S)
            continue
        last = trio.current_time()
        try:
            actions = plan(
                library.store,
                library.usage.uses,
                now_ns=library.now_ns(),
                stale_days=settings.get_int("skills.stale_days"),
                threshold=settings.get_real("skills.duplicate_threshold"),
            )
            if actions:
                write(functools.partial(apply, library.store, actions))
                await settle()
                log.info("skills: the scheduled curation did %d actions", len(actions))
        except NagaError:  # the next run tries again; the core serves on
            log.exception("skills: the scheduled curation failed")


__all__ = ["IDLE_POLL_S", "RECHECK_S", "curate_when_idle"]
