"""The SDK's shared call plumbing without a core: which calls are retried
after UNAVAILABLE, and how an undecodable answer or event is reported.

The transport below stands in for the socket only; the code under test is
the client's own (``naga.sdk._rpc`` and the call groups built on it).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from naga.sdk import Client, CoreAddress, Subscription, TurnEvents, errors
from naga.sdk._transport import StreamCall, Transport, unavailable
from naga.v1 import core_pb2 as cpb
from naga.v1 import ledger_pb2 as lpb
from naga.v1 import turn_pb2 as tpb

_UNDECODABLE = b"\xff"  # field number 0 is never valid protobuf


class _ScriptedTransport(Transport):
    """Answers unary calls from a script: bytes to return, or None for UNAVAILABLE."""

    def __init__(self, address: CoreAddress, script: list[bytes | None]) -> None:
        super().__init__(address, lambda: "Naga unused")
        self.script = script
        self.methods: list[str] = []

    def unary(self, method: str, request: bytes, timeout: float) -> bytes:
        self.methods.append(method)
        answer = self.script.pop(0)
        if answer is None:
            raise unavailable(self.address, "scripted")
        return answer


class _RawCall:
    """What grpcio's stream call offers StreamCall: iteration and cancel."""

    def __init__(self, raw: list[bytes]) -> None:
        self.raw = raw
        self.cancelled = False

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.raw)

    def cancel(self) -> None:
        self.cancelled = True


def _client(tmp_path: Path, script: list[bytes | None]) -> tuple[Client, _ScriptedTransport]:
    transport = _ScriptedTransport(CoreAddress.resolve(tmp_path / "core.sock"), script)
    return Client(transport, 1.0), transport


def test_a_read_is_retried_after_unavailable(tmp_path: Path) -> None:
    head = lpb.Head(size=7).SerializeToString()
    client, transport = _client(tmp_path, [None, None, head])
    assert client.head().size == 7
    assert transport.methods == ["/naga.v1.LedgerService/GetHead"] * 3


def test_a_read_gives_up_after_three_attempts(tmp_path: Path) -> None:
    client, transport = _client(tmp_path, [None, None, None, b""])
    with pytest.raises(errors.CoreUnavailable):
        client.list_settings()
    assert len(transport.methods) == 3


def test_a_write_is_never_retried(tmp_path: Path) -> None:
    client, transport = _client(tmp_path, [None, cpb.SetSettingResponse().SerializeToString()])
    with pytest.raises(errors.CoreUnavailable):
        client.set_setting("agent.max_steps", 3)
    assert transport.methods == ["/naga.v1.KernelService/SetSetting"]


def test_a_dry_run_rollback_is_a_read_and_a_real_one_a_write(tmp_path: Path) -> None:
    answer = cpb.RollbackResponse().SerializeToString()
    client, transport = _client(tmp_path, [None, answer, None])
    client.rollback(3, dry_run=True)
    assert len(transport.methods) == 2
    with pytest.raises(errors.CoreUnavailable):
        client.rollback(3)
    assert len(transport.methods) == 3


def test_an_undecodable_answer_names_the_method(tmp_path: Path) -> None:
    client, _ = _client(tmp_path, [_UNDECODABLE])
    with pytest.raises(
        errors.CoreFailure, match=r"^/naga\.v1\.TurnService/Abort: undecodable response"
    ):
        client.abort_turn("s1")


def test_streams_decode_their_events_and_name_an_undecodable_one(tmp_path: Path) -> None:
    transport = Transport(CoreAddress.resolve(tmp_path / "core.sock"), lambda: "Naga unused")
    good = lpb.SubscribeEvent().SerializeToString()
    events = Subscription(StreamCall(transport, "Subscribe", _RawCall([good, _UNDECODABLE])))
    seen = iter(events)
    assert next(seen) == lpb.SubscribeEvent()
    with pytest.raises(errors.CoreFailure, match=r"^Subscribe: undecodable event"):
        next(seen)
    event = tpb.TurnEvent(index=4).SerializeToString()
    raw = _RawCall([event, _UNDECODABLE])
    turn = TurnEvents(StreamCall(transport, "Run", raw))
    seen_turn = iter(turn)
    assert next(seen_turn).index == 4
    with pytest.raises(errors.CoreFailure, match=r"^Run: undecodable event"):
        next(seen_turn)
    turn.cancel()
    assert raw.cancelled


def test_a_failure_on_a_replaced_channel_does_not_drop_the_new_one(tmp_path: Path) -> None:
    # Two clients on one channel both see UNAVAILABLE: the second reset must
    # not close the channel the first one's next call already reopened.
    sock = tmp_path / "core.sock"
    with socket.socket(socket.AF_UNIX) as bound:  # grpc connects lazily; the
        bound.bind(str(sock))  # transport only checks that a socket is there
    owner = Transport(CoreAddress.resolve(sock), lambda: "Naga owner")
    derived = owner.derive(lambda: "Capability derived")
    first, gen1, owner_md = owner._open()  # pyright: ignore[reportPrivateUsage]
    same, gen, derived_md = derived._open()  # pyright: ignore[reportPrivateUsage]
    assert (same, gen) == (first, gen1)
    assert (owner_md, derived_md) == (
        (("authorization", "Naga owner"),),
        (("authorization", "Capability derived"),),
    )
    owner.reset(gen1)
    fresh, gen2, _ = derived._open()  # pyright: ignore[reportPrivateUsage]
    assert fresh is not first
    assert gen2 != gen1
    derived.reset(gen1)  # a late report from a call on the old channel
    assert derived._open()[:2] == (fresh, gen2)  # pyright: ignore[reportPrivateUsage]
    derived.close()  # not its channel to close
    assert owner._open()[:2] == (fresh, gen2)  # pyright: ignore[reportPrivateUsage]
    owner.close()
    assert owner._open()[1] != gen2  # pyright: ignore[reportPrivateUsage]
    owner.close()
