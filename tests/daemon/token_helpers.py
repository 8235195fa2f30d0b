"""A real core for the token tests: in this process, with a clock the test
moves, an owner client, and on exit the checks every token test ends with
(the core still serves; after it stops, its ledger verifies)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field

import pytest

from naga.sdk import Client, errors
from naga.tokens import RejectReason, Risk, Token, TrustLevel
from naga.v1 import ledger_pb2 as lpb
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.ledger_helpers import verify_home

SECOND = 10**9


@dataclass
class MovableClock:
    """The core's wall clock, moved by the test (a plain int: reads and
    writes of it are atomic under the GIL)."""

    now: int = field(default_factory=time.time_ns)

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


@dataclass
class TokenCore:
    core: InProcessCore
    owner: Client
    clock: MovableClock

    @property
    def home(self) -> str:
        return self.core.info.home

    def holder(self, token: Token) -> Client:
        return Client.connect(self.home, credential=token)

    def mint(self, role: str = "executor", **kw: object) -> Token:
        args: dict[str, object] = {"trust": TrustLevel.KNOWN, "risk": Risk.R1}
        args.update(kw)
        return self.owner.mint(role, **args).token  # type: ignore[arg-type]


@contextlib.contextmanager
def token_core(home: str, clock: MovableClock | None = None) -> Generator[TokenCore]:
    clock = clock or MovableClock()
    with core_in_thread(home, clock=clock) as core, core.client() as owner:
        yield TokenCore(core, owner, clock)
        assert owner.status().processes[0].state != 0  # still serving
        owner.shutdown("test done")
        core.join()
    verify_offline(home)


def verify_offline(home: str) -> None:
    verify_home(home)


@contextlib.contextmanager
def refused(
    cls: type[errors.TokenRefused], code: str, reason: RejectReason
) -> Generator[pytest.ExceptionInfo[errors.TokenRefused]]:
    """Expect a token refusal of exactly this class, status code and reason."""
    with pytest.raises(cls) as info:
        yield info
    assert info.value.code == code, info.value
    assert info.value.reason is reason, info.value


def caught_up(events: Iterator[lpb.SubscribeEvent]) -> list[lpb.Record]:
    """Records up to the first caught_up; the stream then waits, idle."""
    got: list[lpb.Record] = []
    for event in events:
        if event.WhichOneof("event") == "caught_up":
            return got
        got.append(event.record)
    raise AssertionError("the stream ended before it caught up")
