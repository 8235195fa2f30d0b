"""What the WebChat crash tests share: a fake model on its own trio thread,
the gateway's pinned port and its process row, a reconnecting owner
client, and the ledger's view of which key ran how many times and how each
turn ended (tests/crash/test_gateway_kill.py, test_webchat_modes.py)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from naga.sdk import Client
from naga.v1 import agent_pb2 as apb
from naga.v1 import core_pb2 as cpb
from tests.fakes.model_server import FakeModelServer
from tests.gateway._client import WsClient

#: The names a test may hold replies under; all are let go at the end, so
#: a failed test leaves no request of the model hanging.
HOLDS = ("first", "second")


def pinned_port() -> int:
    """A free port for the gateway, pinned for the run: it must come back
    on the same port after a kill (as tests/gateway/test_real_core.py)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def model_thread() -> Generator[tuple[FakeModelServer, trio.lowlevel.TrioToken]]:
    """The fake model serving on a trio loop of its own thread (the test's
    own loops come and go with ``trio.run`` around each kill); at the end
    its ``HOLDS`` are released (a no-op for a name never held), so no held
    reply keeps a connection open."""
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                box["server"] = await nursery.start(FakeModelServer().serve)
                box["token"] = trio.lowlevel.current_trio_token()
                box["scope"] = nursery.cancel_scope
                started.set()

        trio.run(main)

    thread = threading.Thread(target=run, name="webchat-crash-model")
    thread.start()
    assert started.wait(10)
    try:
        yield box["server"], box["token"]
    finally:
        for name in HOLDS:
            trio.from_thread.run_sync(box["server"].release, name, trio_token=box["token"])
        trio.from_thread.run_sync(box["scope"].cancel, trio_token=box["token"])
        thread.join(10)


def gateway_row(home: str) -> cpb.ProcessStatus:
    with Client.connect(home) as c:
        (row,) = [p for p in c.status().processes if p.role == "gateway"]
        return row


async def reconnect(port: int, cookie: str, **connect: Any) -> WsClient:
    """The restarted gateway's console (its restart is the core's, with
    backoff); the owner's session cookie outlives the gateway (and the
    core: it is the core's, in its ledger)."""
    with trio.fail_after(60):
        while True:
            try:
                c = await WsClient.open(port, cookie=cookie)
                await c.connect(**connect)
            except (OSError, AssertionError, trio.BrokenResourceError):
                await trio.sleep(0.05)
            else:
                return c


def records(home: str) -> list[Any]:
    """Every record of the home's ledger, through the running core."""
    out: list[Any] = []
    with Client.connect(home) as c:
        while True:
            page = c.records(len(out) and out[-1].seq + 1, 500)
            if not page:
                return out
            out += page


@dataclass
class TurnLedger:
    """What the ledger says ran: per key its ``turn.message`` and
    ``turn.steer`` records, and per turn its ends."""

    #: key -> the turn ids of its turn.message records
    messages: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    #: key -> the turn ids its turn.steer records steered
    steers: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    #: turn id -> its ends: (kind, seq, body)
    ends: dict[str, list[tuple[str, int, apb.TurnRecord]]] = field(
        default_factory=dict[str, list[tuple[str, int, apb.TurnRecord]]]
    )

    @classmethod
    def read(cls, home: str) -> TurnLedger:
        out = cls()
        for r in records(home):
            if r.kind not in ("turn.message", "turn.steer", "turn.reply", "turn.error"):
                continue
            body = apb.TurnRecord.FromString(r.payload)
            if r.kind == "turn.message":
                out.messages.setdefault(body.idempotency_key, []).append(body.turn_id)
            elif r.kind == "turn.steer":
                out.steers.setdefault(body.idempotency_key, []).append(body.turn_id)
            else:
                out.ends.setdefault(body.turn_id, []).append((r.kind, r.seq, body))
        return out

    def turn_of(self, key: str) -> str:
        """The one turn ``key`` ran in (its own, or the one it steered)."""
        (turn,) = self.messages.get(key, []) + self.steers.get(key, [])
        return turn

    def end_of(self, event: dict[str, Any]) -> str | None:
        """The turn whose recorded end a client's ``turn.final`` (by its
        reply seq) or ``turn.error`` (by its message) is, if any."""
        for turn, ends in self.ends.items():
            for kind, seq, body in ends:
                if (event["event"], kind) == ("turn.final", "turn.reply"):
                    found = event["data"]["reply_seq"] == seq
                else:
                    is_error = (event["event"], kind) == ("turn.error", "turn.error")
                    found = is_error and event["data"]["message"] == body.error_message
                if found:
                    return turn
        return None
