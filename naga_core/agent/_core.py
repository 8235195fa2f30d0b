"""What the agent needs of the core it runs in and of whoever calls it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

import trio

from naga_core._home import Home
from naga_core.authz import Grant, TokenAuthority
from naga_core.kernel import Kernel, Settings
from naga_core.ledger import Ledger

T = TypeVar("T")


class Caller(Protocol):
    """Who calls (the daemon's Principal): the owner, or a token's grant."""

    @property
    def owner(self) -> bool: ...

    @property
    def grant(self) -> Grant | None: ...


class Core(Protocol):
    """What the agent needs of the core (naga_core.daemon's Core)."""

    @property
    def home(self) -> Home: ...
    @property
    def socket(self) -> str: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def kernel(self) -> Kernel: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def authority(self) -> TokenAuthority | None: ...
    def write(self, fn: Callable[[], T]) -> T: ...
    def settle(self) -> bool: ...
    def notify_appended(self) -> None: ...
    async def wait_past(self, size: int) -> None:
        """Return once the ledger holds more than ``size`` records, or the core stops."""
        ...


class Standing(Protocol):
    """Whether a token still stands (the daemon's TokenStanding): not
    revoked, not expired, its principal's trust not lowered below its
    grant's (docs/design/authz.md, "Open streams")."""

    def check(self) -> None:
        """Raise the refusal (TokenRejected, TrustLowered) if it no longer stands."""
        ...

    def deadline(self) -> float:
        """The trio time by which to check again even if nothing woke us."""
        ...

    def waking(self, scope: trio.CancelScope) -> AbstractContextManager[None]:
        """While inside: ``scope`` is cancelled when a revocation or a trust
        change may have changed the answer."""
        ...


#: A grant's standing, as the core's authorizer builds them.
StandingOf = Callable[[Grant], Standing]


def authority_of(core: Core) -> TokenAuthority:
    """The core's token authority (built before the agent serves)."""
    assert core.authority is not None
    return core.authority


__all__ = ["Caller", "Core", "Standing", "StandingOf", "authority_of"]
