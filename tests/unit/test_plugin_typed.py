"""Typed tools of the core's own workers (docs/adr/0008-turn-payload-encoding.md),
the SDK's side over a socket pair: the payload arrives parsed and the
answer leaves as a payload; a call without one is refused; a manifest that
gives a typed tool params is refused; Pings are answered while a typed
call runs (a long call is not a hang: docs/adr/0009)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from naga.plugin import FrameReader, Manifest, decode_from_plugin, encode_frame
from naga.v1 import agent_pb2 as apb
from naga.v1 import plugin_pb2 as pb
from naga_plugins import Plugin, PluginSetupError

MANIFEST = """
name = "typed"
version = "0.1.0"
kind = "tool"
description = "A typed tool"
entry = "x.typed:main"

[limits]
max_concurrent_calls = 2

[[tools]]
name = "typed.turn"
risk = "R0"
description = "An ExecutorJob in, an ExecutorOutcome out"
"""


def _plugin(gate: threading.Event) -> Plugin:
    typed = Plugin("typed")

    @typed.typed_tool("typed.turn")
    def turn(invoke: pb.Invoke) -> pb.Result:  # pyright: ignore[reportUnusedFunction]
        if invoke.executor_job.session == "slow":
            gate.wait(10)
        outcome = apb.ExecutorOutcome(text=f"{invoke.executor_job.session}:{invoke.deadline_ms}")
        return pb.Result(executor_outcome=outcome)

    return typed


class _Core:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = FrameReader()

    def send(self, frame: pb.CoreToPlugin) -> None:
        self.sock.sendall(encode_frame(frame))

    def receive(self) -> pb.PluginToCore:
        while (body := self.reader.next_body()) is None:
            data = self.sock.recv(65536)
            assert data, "the plugin closed the connection"
            self.reader.feed(data)
        return decode_from_plugin(body)


@pytest.fixture
def core(tmp_path: Path) -> Iterator[tuple[_Core, threading.Event]]:
    path = tmp_path / "plugin.toml"
    path.write_text(MANIFEST)
    ours, theirs = socket.socketpair()
    gate = threading.Event()
    fd = str(theirs.detach())
    thread = threading.Thread(target=lambda: _plugin(gate).main([fd, str(path)]))
    thread.start()
    c = _Core(ours)
    assert c.receive().WhichOneof("frame") == "hello"
    try:
        yield c, gate
    finally:
        gate.set()
        c.send(pb.CoreToPlugin(shutdown=pb.Shutdown(reason="done")))
        thread.join(10)
        ours.close()


def _invoke(call_id: int, session: str | None) -> pb.CoreToPlugin:
    invoke = pb.Invoke(call_id=call_id, tool="typed.turn", deadline_ms=1234)
    if session is not None:
        invoke.executor_job.CopyFrom(apb.ExecutorJob(session=session, turn_id="t-1"))
    return pb.CoreToPlugin(invoke=invoke)


def test_the_payload_goes_in_and_comes_out_typed(core: tuple[_Core, threading.Event]) -> None:
    c, _gate = core
    c.send(_invoke(1, "s-1"))
    result = c.receive().result
    assert result.call_id == 1
    assert result.result_json == ""
    assert result.WhichOneof("payload") == "executor_outcome"
    assert result.executor_outcome.text == "s-1:1234"


def test_a_typed_call_without_its_payload_is_refused(core: tuple[_Core, threading.Event]) -> None:
    c, _gate = core
    c.send(_invoke(2, None))
    error = c.receive().error
    assert error.kind == pb.TOOL_ERROR_KIND_INVALID_ARGUMENTS
    assert "takes a payload" in error.message


def test_pings_are_answered_while_a_typed_call_runs(core: tuple[_Core, threading.Event]) -> None:
    c, gate = core
    c.send(_invoke(3, "slow"))
    for nonce in (1, 2, 3):
        c.send(pb.CoreToPlugin(ping=pb.Ping(nonce=nonce)))
        assert c.receive().pong.nonce == nonce
    gate.set()
    assert c.receive().result.executor_outcome.text == "slow:1234"


def test_a_typed_tool_with_params_in_its_manifest_is_refused() -> None:
    with_params = MANIFEST + '\n[tools.params.job]\ntype = "string"\n'
    with pytest.raises(PluginSetupError, match="takes a typed payload"):
        _plugin(threading.Event()).check(Manifest.parse(with_params))
