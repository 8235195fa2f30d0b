"""What the agent needs of the core it runs in and of whoever calls it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

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


def authority_of(core: Core) -> TokenAuthority:
    """The core's token authority (built before the agent serves)."""
    assert core.authority is not None
    return core.authority


__all__ = ["Caller", "Core", "authority_of"]
