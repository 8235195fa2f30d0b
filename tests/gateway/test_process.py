"""The gateway as a process (``python -m naga_gateway``), configured by the
environment the sandbox passes, serving a turn from the fake core."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from sandbox import CORE_SOCKET_ENV, TOKEN_ENV
from tests.fakes.turn_core import FakeCore
from tests.gateway._login import owner_client

ROOT = Path(__file__).resolve().parents[2]


def _spawn(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "naga_gateway", "--port", "0"],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_gateway_process_serves_a_turn(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core
    token = base64.b64encode(b"not-a-real-token").decode()
    proc = _spawn({CORE_SOCKET_ENV: socket, TOKEN_ENV: token})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("naga-gateway listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])

        async def turn() -> None:
            with trio.fail_after(20):
                c = await owner_client(port, core.login_code)
                await c.connect()
                assert (await c.request("send", session="p", text="hi", key="1"))["ok"]
                await c.until_event("turn.final")
                await c.aclose()

        trio.run(turn)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    assert proc.returncode == 0
    assert [r.text for r in core.runs] == ["hi"]


def test_without_a_token_it_refuses_to_start(fake_core: tuple[FakeCore, str]) -> None:
    _core, socket = fake_core
    proc = _spawn({CORE_SOCKET_ENV: socket, TOKEN_ENV: ""})
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode != 0
    assert f"{TOKEN_ENV} must hold the gateway's capability token" in err
