"""The WebChat path with nothing faked but the model: a real
``naga daemon start`` process starts its gateway as a sandboxed process
(Seccomp 2, NoNewPrivs 1, listed by ``naga daemon status``), and a
WebSocket client on loopback (the owner) sends a message that a sandboxed
executor answers through the provider plugin and the fake model; the reply
streams back and the session's history holds both."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
import trio

from naga.sdk import Client
from naga.v1 import core_pb2 as cpb
from tests.agent.conftest import ServerThread, model_server, write_providers
from tests.daemon.conftest import start_core_process
from tests.fakes.model_server import Reply
from tests.gateway._client import WsClient

__all__ = ["model_server"]  # the fixture, used by name below


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def home(tmp_path: Path) -> str:
    h = tmp_path / "home"
    h.mkdir(mode=0o700)
    return str(h)


def test_a_webchat_message_is_answered_by_the_real_core(
    home: str, tmp_path: Path, model_server: ServerThread
) -> None:
    write_providers(home, model_server.server.openai_url)
    model_server.script(Reply.answer("hello from the model", usage=(12, 4)))
    port = _free_port()
    core = start_core_process(home, tmp_path / "core.log", gateway_port=port)
    try:
        with Client.connect(home) as c:
            rows = {p.role: p for p in c.status().processes}
        gw = rows["gateway"]
        assert gw.state == cpb.PROCESS_STATE_RUNNING, core.output()
        assert gw.detail == f"http://127.0.0.1:{port}/"
        with open(f"/proc/{gw.pid}/status", encoding="ascii") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        assert status["Seccomp"].strip() == "2"
        assert status["NoNewPrivs"].strip() == "1"

        async def chat() -> None:
            c = await WsClient.open(port)
            hello = await c.connect()
            assert hello["trust"] == "owner"
            resp = await c.request("send", session="web-1", text="hi there", key="k-1")
            assert resp["ok"], resp
            final = await c.until_event("turn.final", "web-1")
            assert final["data"]["text"] == "hello from the model"
            hist = await c.request("history", session="web-1")
            texts = [(e["role"], e["text"]) for e in hist["result"]["entries"]]
            assert texts == [("user", "hi there"), ("assistant", "hello from the model")]
            await c.aclose()

        try:
            trio.run(chat)
        except AssertionError as exc:  # the core's side of it is in its log
            raise AssertionError(f"{exc}\n--- core log ---\n{core.output()[-4000:]}") from None
    finally:
        os.kill(core.pid, signal.SIGTERM)
        assert core.proc.wait(60) == 0, core.output()
    # The gateway went with the core.
    with pytest.raises(ProcessLookupError):
        os.kill(gw.pid, 0)
