"""Open streams stay admitted only while their token does: revocation and
expiry reach a stream that is already open (docs/design/authz.md, "Open
streams").

The cheap path, per batch: the revocation epoch the stream last checked at
is still the current one, and the authority's clock is before the token's
expiry (an int comparison each). Only when the epoch moved does the stream
look the token and its lineage up in the revocation list again. A stream
waiting for its next batch is woken by every revocation (the watch cancels
its wait) and at its token's expiry (its wait's deadline), checks, and then
either ends with the refusal or waits again: nothing polls.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Generator

import trio

from naga_core.authz import Grant, TokenAuthority

#: Longest a waiting stream goes without reading the clock again, so that
#: a wall clock set forward (the authority's clock is wall time) cuts an
#: expired stream within this bound rather than at the old deadline.
RELOOK_S = 60.0


class RevocationWatch:
    """The core's revocation epoch, and the streams waiting that it wakes.

    Everything that may change the revocation list tells it (:meth:`bump`):
    a revocation (``CoreAuthorizer.revoke``) and a rollback (which may bring
    a revocation back). On the loop only.
    """

    def __init__(self) -> None:
        self.epoch = 0
        self._waiting: set[trio.CancelScope] = set()

    def bump(self) -> None:
        self.epoch += 1
        for scope in self._waiting:
            scope.cancel()

    @contextlib.contextmanager
    def waking(self, scope: trio.CancelScope) -> Generator[None]:
        self._waiting.add(scope)
        try:
            yield
        finally:
            self._waiting.discard(scope)

    @property
    def waiting(self) -> int:
        """Streams waiting now (for the tests and the status page)."""
        return len(self._waiting)


class TokenStanding:
    """An open stream's token: still not revoked (nor any ancestor), not
    expired. Build with :meth:`of`."""

    __slots__ = ("_authority", "_grant", "_seen", "_watch")

    def __init__(self, authority: TokenAuthority, grant: Grant, watch: RevocationWatch) -> None:
        self._authority = authority
        self._grant = grant
        self._watch = watch
        self._seen = watch.epoch  # admit() checked the revocation list at this epoch

    @classmethod
    def of(cls, authority: TokenAuthority, grant: Grant, watch: RevocationWatch) -> TokenStanding:
        return cls(authority, grant, watch)

    def check(self) -> None:
        epoch = self._watch.epoch
        if epoch != self._seen:
            self._authority.recheck(self._grant)  # the full look-up
            self._seen = epoch
            return
        expires = self._grant.expires_at_ns
        if expires is not None and self._authority.now_ns() >= expires:
            self._authority.recheck(self._grant)  # raises EXPIRED, with the words

    def deadline(self) -> float:
        expires = self._grant.expires_at_ns
        if expires is None:
            return math.inf
        left_s = max(0.0, (expires - self._authority.now_ns()) / 1e9)
        return trio.current_time() + min(left_s, RELOOK_S)

    def waking(self, scope: trio.CancelScope) -> contextlib.AbstractContextManager[None]:
        return self._watch.waking(scope)


__all__ = ["RELOOK_S", "RevocationWatch", "TokenStanding"]
