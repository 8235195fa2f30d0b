"""The WebChat path with nothing faked but the model: a real
``naga daemon start`` process starts its gateway as a sandboxed process
(Seccomp 2, NoNewPrivs 1, listed by ``naga daemon status``), and a
WebSocket client with the owner's login cookie sends a message that a sandboxed
executor answers through the provider plugin and the fake model; the reply
streams back and the session's history holds both."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
from pathlib import Path

import pytest
import trio

from naga.sdk import Client
from naga.v1 import authz_pb2 as apb
from naga.v1 import core_pb2 as cpb
from naga_core.authz import MINTED_KIND
from naga_core.cli import main as cli_main
from tests.agent.conftest import ServerThread, model_server, write_providers
from tests.daemon.conftest import start_core_process
from tests.fakes.model_server import Reply
from tests.gateway._client import Closed, WsClient
from tests.gateway._login import core_codes, owner_client, owner_cookie

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
    home: str, tmp_path: Path, model_server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    write_providers(home, model_server.server.openai_url)
    model_server.script(Reply.answer("hello from the model", usage=(12, 4)))
    port = _free_port()
    core = start_core_process(home, tmp_path / "core.log", gateway_port=port)
    try:
        with Client.connect(home) as c:
            rows = {p.role: p for p in c.status().processes}
            minted = [
                apb.TokenMinted.FromString(r.payload)
                for r in c.records(0, 1000)
                if r.kind == MINTED_KIND
            ]
        # The gateway's token is in the ledger (its shape, not its secret).
        assert [(m.role, m.minted_by) for m in minted if m.role == "gateway"] == [
            ("gateway", "core: gateway")
        ]
        gw = rows["gateway"]
        assert gw.state == cpb.PROCESS_STATE_RUNNING, core.output()
        assert gw.detail == f"http://127.0.0.1:{port}/"
        with open(f"/proc/{gw.pid}/status", encoding="ascii") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        assert status["Seccomp"].strip() == "2"
        assert status["NoNewPrivs"].strip() == "1"

        async def chat() -> None:
            c = await owner_client(port, core_codes(home))
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
        # naga chat goes through the gateway too, with the owner's proof.
        model_server.script(Reply.answer("via the gateway", usage=(6, 3)))
        capsys.readouterr()
        assert cli_main(["chat", "--home", home, "--json", "--session", "web-1", "again"]) == 0
        said = json.loads(capsys.readouterr().out)
        assert (said["ok"], said["via"], said["text"]) == (True, "gateway", "via the gateway")
    finally:
        os.kill(core.pid, signal.SIGTERM)
        assert core.proc.wait(60) == 0, core.output()
    # The gateway went with the core.
    with pytest.raises(ProcessLookupError):
        os.kill(gw.pid, 0)


def test_a_gateway_killed_mid_turn_is_restarted_and_nothing_is_lost_or_run_twice(
    home: str, tmp_path: Path, model_server: ServerThread
) -> None:
    """SIGKILL the gateway right after it acknowledged a message: the core's
    supervisor starts it again (and journals why); the client reconnects and
    resends with the same idempotency key; the core answers the recorded
    message once."""
    write_providers(home, model_server.server.openai_url)
    model_server.script(Reply.answer("slow but sure", usage=(8, 3)))
    port = _free_port()
    core = start_core_process(home, tmp_path / "core.log", gateway_port=port)
    try:
        with Client.connect(home) as c:
            first = {p.role: p for p in c.status().processes}["gateway"].pid

        cookie = trio.run(owner_cookie, port, core_codes(home))

        async def send_then_lose_the_gateway() -> int:
            c = await WsClient.open(port, cookie=cookie)
            await c.connect()
            resp = await c.request("send", session="web-2", text="one", key="k-once")
            assert resp["ok"], resp
            os.kill(first, signal.SIGKILL)  # acknowledged; the turn runs in the core
            await c.aclose()
            seq: int = resp["result"]["message_seq"]
            return seq

        seq = trio.run(send_then_lose_the_gateway)

        async def again() -> None:
            with trio.fail_after(60):
                while True:  # the supervisor restarts it (backoff 0.25 s first)
                    try:
                        # The login outlives the gateway: the same cookie.
                        c = await WsClient.open(port, cookie=cookie)
                        break
                    except Closed as exc:
                        if exc.code == 401:
                            raise
                        await trio.sleep(0.05)  # going down
                    except (OSError, trio.BrokenResourceError):
                        await trio.sleep(0.05)  # not back yet
            await c.connect()
            resp = await c.request("send", session="web-2", text="one", key="k-once")
            assert resp["ok"], resp
            assert resp["result"]["message_seq"] == seq  # the same recorded message
            hist = await c.request("history", session="web-2")
            while len(hist["result"]["entries"]) < 2:  # the turn finishes in the core
                await trio.sleep(0.1)
                hist = await c.request("history", session="web-2")
            texts = [(e["role"], e["text"]) for e in hist["result"]["entries"]]
            assert texts == [("user", "one"), ("assistant", "slow but sure")]
            await c.aclose()

        try:
            trio.run(again)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- core log ---\n{core.output()[-4000:]}") from None
        with Client.connect(home) as c:
            gw = {p.role: p for p in c.status().processes}["gateway"]
            described = " ".join(e.description for e in c.history(50).entries)
        assert gw.pid != first
        assert gw.restarts == 1
        assert "gateway: the gateway ended" in described
        asked = model_server.run(lambda: list(model_server.server.requests))
        runs = [r for r in asked if b'"one"' in r.body]
        assert len(runs) == 1, "the turn ran twice"
    finally:
        os.kill(core.pid, signal.SIGTERM)
        assert core.proc.wait(60) == 0, core.output()


def test_a_gateway_whose_core_is_killed_stops_and_frees_its_port(
    home: str, tmp_path: Path, model_server: ServerThread
) -> None:
    """SIGKILL the core (no chance to stop its children): its gateway sees
    the lifeline end and stops by itself, so the next core's gateway gets
    the same port and serves."""
    write_providers(home, model_server.server.openai_url)
    port = _free_port()
    core = start_core_process(home, tmp_path / "core.log", gateway_port=port)
    try:
        with Client.connect(home) as c:
            first = {p.role: p for p in c.status().processes}["gateway"].pid
        pidfd = os.pidfd_open(first)
    finally:
        os.kill(core.pid, signal.SIGKILL)
        core.proc.wait(30)
    try:
        ended, _, _ = select.select([pidfd], [], [], 30)
    finally:
        os.close(pidfd)
    assert ended, f"the gateway (pid {first}) outlived its killed core"
    again = start_core_process(home, tmp_path / "core2.log", gateway_port=port)
    try:
        with Client.connect(home) as c:
            gw = {p.role: p for p in c.status().processes}["gateway"]
        assert gw.state == cpb.PROCESS_STATE_RUNNING, again.output()
        assert gw.pid != first
        assert gw.detail == f"http://127.0.0.1:{port}/"
    finally:
        os.kill(again.pid, signal.SIGTERM)
        assert again.proc.wait(60) == 0, again.output()


def test_the_gateways_stderr_is_a_pipe_into_the_cores_log_not_the_log_itself(
    home: str, tmp_path: Path, model_server: ServerThread
) -> None:
    """The gateway holds no descriptor of the core's log (it could seek,
    truncate or forge it): its fd 2 is a pipe, and what it writes there
    reaches the core's log under its name."""
    write_providers(home, model_server.server.openai_url)
    port = _free_port()
    log = tmp_path / "core.log"
    core = start_core_process(home, log, gateway_port=port)
    try:
        with Client.connect(home) as c:
            gw = {p.role: p for p in c.status().processes}["gateway"]
        assert gw.state == cpb.PROCESS_STATE_RUNNING, core.output()
        stderr = os.readlink(f"/proc/{gw.pid}/fd/2")
        assert stderr.startswith("pipe:["), stderr
        assert not os.path.samefile(f"/proc/{gw.pid}/fd/2", log)
        # The core's own stderr is the log: the gateway's is something else.
        assert os.path.samefile(f"/proc/{core.pid}/fd/2", log)
    finally:
        os.kill(core.pid, signal.SIGTERM)
        assert core.proc.wait(60) == 0, core.output()
    # Written before its readiness line, so copied once the core had it up.
    said = f"gateway: naga-gateway: serving on 127.0.0.1:{port}"
    lines = core.output().splitlines()
    assert any(line.endswith(said) for line in lines), core.output()[-4000:]
    # Only ever through the core's copy: no line of it is the gateway's raw output.
    assert not any(line.startswith("naga-gateway: serving") for line in lines)
