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

A token held for a principal was also admitted at that principal's trust
(the grant's trust: the token's ceiling capped by the trust table). The
trust table's epoch is the kernel's version of the ``trust`` family, which
every change to it moves wherever it came from (the owner's SetTrust, the
violation policy, a rollback, a merge); when it moved, the stream looks the
principal's level up again and ends if it fell below the grant's
(:class:`~naga_core.authz.TrustLowered`). The core wakes waiting streams
after any write that moved it (:meth:`TrustWatch.notice`, from
``Core.write``, the one way kernel writes are made on the loop).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Generator

import trio

from naga_core.authz import Grant, TokenAuthority
from naga_core.kernel import TRUST_FAMILY, Kernel

#: Longest a waiting stream goes without reading the clock again, so that
#: a wall clock set forward (the authority's clock is wall time) cuts an
#: expired stream within this bound rather than at the old deadline.
RELOOK_S = 60.0


class _Waiters:
    """The cancel scopes of the streams waiting now, woken all at once."""

    def __init__(self) -> None:
        self._waiting: set[trio.CancelScope] = set()

    def _wake(self) -> None:
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


class RevocationWatch(_Waiters):
    """The core's revocation epoch, and the streams waiting that it wakes.

    Everything that may change the revocation list tells it (:meth:`bump`):
    a revocation (``CoreAuthorizer.revoke``) and a rollback (which may bring
    a revocation back). On the loop only.
    """

    def __init__(self) -> None:
        super().__init__()
        self.epoch = 0

    def bump(self) -> None:
        self.epoch += 1
        self._wake()


class TrustWatch(_Waiters):
    """The trust table's epoch, and the streams waiting that it wakes.

    The epoch is read from its source (the kernel's version of the trust
    family), never bumped by the writers of trust: none can forget to.
    :meth:`notice` wakes the waiting streams when it moved since the last
    notice; the core calls it after every kernel write. Build with
    :meth:`over_kernel` (or :meth:`over`, a source of epochs, for tests).
    On the loop only.
    """

    def __init__(self, epoch: Callable[[], int]) -> None:
        super().__init__()
        self._epoch = epoch
        self._noticed = epoch()

    @classmethod
    def over(cls, epoch: Callable[[], int]) -> TrustWatch:
        return cls(epoch)

    @classmethod
    def over_kernel(cls, kernel: Kernel) -> TrustWatch:
        return cls(lambda: kernel.version(TRUST_FAMILY))

    @property
    def epoch(self) -> int:
        return self._epoch()

    def notice(self) -> None:
        """After a write: wake the waiting streams if the trust table may
        have changed (one int comparison when it did not)."""
        epoch = self._epoch()
        if epoch != self._noticed:
            self._noticed = epoch
            self._wake()


class TokenStanding:
    """An open stream's token: still not revoked (nor any ancestor), not
    expired, its principal's trust not lowered below the grant's. Build
    with :meth:`of`."""

    __slots__ = ("_authority", "_grant", "_revocations", "_seen", "_trust", "_trust_seen")

    def __init__(
        self,
        authority: TokenAuthority,
        grant: Grant,
        revocations: RevocationWatch,
        trust: TrustWatch,
    ) -> None:
        self._authority = authority
        self._grant = grant
        self._revocations = revocations
        self._trust = trust
        # admit() checked the revocation list and read the trust table at these
        self._seen = revocations.epoch
        self._trust_seen = trust.epoch

    @classmethod
    def of(
        cls,
        authority: TokenAuthority,
        grant: Grant,
        revocations: RevocationWatch,
        trust: TrustWatch,
    ) -> TokenStanding:
        return cls(authority, grant, revocations, trust)

    def check(self) -> None:
        epoch = self._revocations.epoch
        if epoch != self._seen:
            self._authority.recheck(self._grant)  # the full look-up
            self._seen = epoch
        else:
            expires = self._grant.expires_at_ns
            if expires is not None and self._authority.now_ns() >= expires:
                self._authority.recheck(self._grant)  # raises EXPIRED, with the words
        trust_epoch = self._trust.epoch
        if trust_epoch != self._trust_seen:
            self._authority.recheck_trust(self._grant)
            self._trust_seen = trust_epoch

    def deadline(self) -> float:
        expires = self._grant.expires_at_ns
        if expires is None:
            return math.inf
        left_s = max(0.0, (expires - self._authority.now_ns()) / 1e9)
        return trio.current_time() + min(left_s, RELOOK_S)

    @contextlib.contextmanager
    def waking(self, scope: trio.CancelScope) -> Generator[None]:
        with self._revocations.waking(scope), self._trust.waking(scope):
            yield


__all__ = ["RELOOK_S", "RevocationWatch", "TokenStanding", "TrustWatch"]
