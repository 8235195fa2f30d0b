"""shell.run through the real core: from inside the command, nothing
outside its view can be read or written, the network cannot be reached,
and nothing it starts outlives its timeout."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

from naga.sdk import Client
from tests.tools._turns import results, tool_turn
from tests.tools.conftest import ToolsCore


def _run(tc: ToolsCore, client: Client, command: str, timeout_s: int = 20) -> dict[str, object]:
    events = tool_turn(
        tc, client, "shell", [("shell.run", {"command": command, "timeout_s": timeout_s})]
    )
    (done,) = results(events)
    assert done.ok, done.error
    out: dict[str, object] = json.loads(done.result_json)
    return out


def test_it_cannot_read_outside_its_view(tools_core: ToolsCore, owner: Client) -> None:
    home = tools_core.home
    key = os.path.join(home, "keys", "token.key")
    with open(key, "rb") as f:
        secret = f.read()
    out = _run(
        tools_core,
        owner,
        f"cat {key}; echo rc=$?; ls {home}/ledger; echo rc=$?; cat /etc/shadow; echo rc=$?;"
        f" ls /root; echo rc=$?; ls /proc/1; echo rc=$?",
    )
    text = str(out["output"])
    assert text.count("rc=0") == 0, text
    assert secret.decode("latin-1") not in text


def test_it_cannot_write_outside_its_view(tools_core: ToolsCore, owner: Client) -> None:
    outside = f"/tmp/naga-shell-escape-{uuid.uuid4().hex}"
    ledger_file = os.path.join(tools_core.home, "ledger", "planted")
    out = _run(
        tools_core,
        owner,
        f"echo x > {outside}; echo rc=$?; echo x > {ledger_file}; echo rc=$?;"
        " echo x > /usr/planted; echo rc=$?; ln -s /etc/passwd pw; cat pw; echo rc=$?",
    )
    text = str(out["output"])
    assert text.count("rc=0") == 0, text
    assert not os.path.exists(outside)
    assert not os.path.exists(ledger_file)
    assert not os.path.exists("/usr/planted")
    # The link it made is in the workspace, pointing at a file it cannot see.
    assert os.readlink(os.path.join(tools_core.workspace, "pw")) == "/etc/passwd"


_CONNECT = "python3 -c \"import socket; socket.create_connection(('{host}', {port}), 2)\""


def test_it_cannot_reach_the_network(tools_core: ToolsCore, owner: Client) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        out = _run(
            tools_core,
            owner,
            f"{_CONNECT.format(host='127.0.0.1', port=port)}; echo rc=$?;"
            f" {_CONNECT.format(host='1.1.1.1', port=80)}; echo rc=$?",
        )
        text = str(out["output"])
        assert "rc=0" not in text, text
        try:
            listener.accept()
            raise AssertionError("the command's connection arrived")
        except BlockingIOError:
            pass
    finally:
        listener.close()


def test_nothing_it_starts_outlives_its_timeout(tools_core: ToolsCore, owner: Client) -> None:
    started = time.monotonic()
    out = _run(
        tools_core,
        owner,
        "sleep 300 & echo bg=$!; (sleep 300 &) ; nohup sleep 300 >/dev/null 2>&1 & echo nohup=$!;"
        " sleep 300",
        timeout_s=2,
    )
    took = time.monotonic() - started
    assert out["timed_out"] is True, out
    assert took < 60, took
    pids = [int(w.split("=")[1]) for w in str(out["output"]).split() if "=" in w]
    assert len(pids) == 2, out
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie_or_other(pid), pid


def _zombie_or_other(pid: int) -> bool:
    """A reused pid is another program; a pid still ours would be 'sleep'."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return not f.read().startswith(b"sleep")
    except FileNotFoundError:
        return True


def test_output_is_capped_and_the_exit_code_reported(tools_core: ToolsCore, owner: Client) -> None:
    events = tool_turn(
        tools_core,
        owner,
        "shell",
        [("shell.run", {"command": "head -c 200000 /dev/zero | tr '\\0' a; exit 3"})],
    )
    (done,) = results(events)
    assert done.ok, done.error
    shown: dict[str, object] = json.loads(done.result_json)
    # The capped output may still be more than the model is shown at once:
    # then it is stored whole and the model sees its head (the metadata first).
    text = str(shown["head"]) if shown.get("truncated") else done.result_json
    if shown.get("truncated"):
        assert int(str(shown["result_bytes"])) < 16 * 1024 + 1024
    assert '"exit_code":3' in text
    assert f'"output_dropped_bytes":{200_000 - 16 * 1024}' in text
