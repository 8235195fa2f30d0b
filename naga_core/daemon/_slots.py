"""Stream slots shared fairly: no one caller can hold every slot of a
server-streaming method (issue 11: one plugin token held all of Subscribe's,
and the owner's console was refused).

Each streaming method has ``max_open`` slots for the owner's side (the owner
credential, and tokens held at the owner's trust: the gateway serving the
console) and as many for everyone else (plugins, executors, tokens held for
others). On the other side, one caller, a token and everything attenuated or
spawned from it (its lineage's root), holds at most a quarter of them, so a
hostile plugin neither starves the owner nor the other plugins. Each slot is
a server thread while it is held: the pools are sized well inside the core's
thread count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from naga.trust import TrustLevel
from naga_core.daemon._auth import Principal
from naga_core.daemon._errors import RequestRefused

#: The share of the others' pool one caller may hold.
OTHERS_SHARE = 4


def _pool_and_caller(principal: Principal) -> tuple[str, str]:
    if principal.owner:
        return "owner", "owner"
    grant = principal.grant
    if grant is None:  # pragma: no cover - every non-owner principal holds a grant
        return "others", principal.name
    root = grant.lineage[0].id if grant.lineage else grant.token_id
    pool = "owner" if grant.trust >= TrustLevel.OWNER else "others"
    return pool, root.hex()


class StreamSlots:
    """Open streams per method, pool and caller. Thread-safe (taken on the
    loop, released on a server thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[tuple[str, str], int] = {}
        self._callers: dict[tuple[str, str], int] = {}

    def take(self, method: str, max_open: int, principal: Principal) -> Callable[[], None]:
        """A slot of ``method`` for ``principal``, and how to give it back;
        RESOURCE_EXHAUSTED, saying whose share is used up, when none is left."""
        pool, caller = _pool_and_caller(principal)
        per_caller = max_open if pool == "owner" else max(1, max_open // OTHERS_SHARE)
        pool_key, caller_key = (method, pool), (method, caller)
        with self._lock:
            open_now = self._pools.get(pool_key, 0)
            if open_now >= max_open:
                raise RequestRefused.exhausted(
                    f"{method}: {open_now} streams are open, the most the core serves at once"
                    + ("" if pool == "owner" else " to callers other than the owner")
                )
            held = self._callers.get(caller_key, 0)
            if held >= per_caller:
                raise RequestRefused.exhausted(
                    f"{method}: this caller holds {held} streams, its share of the "
                    f"{max_open}; close one first"
                )
            self._pools[pool_key] = open_now + 1
            self._callers[caller_key] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                self._pools[pool_key] -= 1
                self._callers[caller_key] -= 1
                if not self._callers[caller_key]:
                    del self._callers[caller_key]

        return release

    def held(self, method: str) -> int:
        """Streams of ``method`` open now, all pools (for tests and status)."""
        with self._lock:
            return sum(n for (m, _), n in self._pools.items() if m == method)


__all__ = ["OTHERS_SHARE", "StreamSlots"]
