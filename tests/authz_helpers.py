"""Shared helpers for the authorization tests: a virtual clock, an authority
over plain dicts, and a kernel over an in-memory or on-disk ledger."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from dataclasses import dataclass, field

from naga_core.authz import AUTHZ_RATCHETS, RootKey, TokenAuthority
from naga_core.kernel import RATCHETS, Actions, Kernel, TrustLevel, open_kernel
from naga_core.ledger import Ledger, SimulatedFileSystem
from tests.ledger_helpers import fixed_signer

KEY = RootKey(bytes(range(32)))
OTHER_KEY = RootKey(bytes(range(1, 33)))
T0 = 1_700_000_000 * 10**9


@dataclass
class VirtualClock:
    now: int = T0

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


@dataclass
class World:
    """What an authority reads, as plain dicts (the kernel-backed versions
    have their own tests)."""

    clock: VirtualClock = field(default_factory=VirtualClock)
    revoked: set[bytes] = field(default_factory=set[bytes])
    spent: dict[bytes, int] = field(default_factory=dict[bytes, int])
    trust: dict[str, TrustLevel] = field(default_factory=dict[str, TrustLevel])
    ids_drawn: int = 0

    def new_id(self) -> bytes:
        self.ids_drawn += 1
        return self.ids_drawn.to_bytes(16, "big")

    def authority(self, key: RootKey = KEY) -> TokenAuthority:
        return TokenAuthority.create(
            key,
            clock=self.clock,
            is_revoked=self.revoked.__contains__,
            spent=lambda tid: self.spent.get(tid, 0),
            trust_of=lambda peer: self.trust.get(peer, TrustLevel.OWNER),
            new_id=self.new_id,
        )


@contextlib.contextmanager
def sim_kernel() -> Generator[tuple[Kernel, Ledger]]:
    """A kernel over a ledger on an in-memory disk, every ratchet wired."""
    with Ledger.open("/ledger", fixed_signer(), fs=SimulatedFileSystem()) as ledger:
        yield Kernel.open(ledger, Actions(), ratchets=(*RATCHETS, *AUTHZ_RATCHETS)), ledger


@contextlib.contextmanager
def disk_kernel(directory: str) -> Generator[tuple[Kernel, Ledger]]:
    """The composition roots' kernel (open_kernel) over a ledger on disk."""
    with Ledger.open(directory, fixed_signer()) as ledger:
        yield open_kernel(ledger, Actions()), ledger
