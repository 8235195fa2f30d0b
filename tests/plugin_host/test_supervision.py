"""A worker's crash, hang, stop, leak or broken protocol is contained: the
call gets a clear, structured error, the worker is rebuilt, the next call
works, the restart and its cause are in the ledger, and the core serves on.
A crash loop is damped: the plugin is FAILED until enabled again.

Every case runs in the real attacker plugin (tests/plugin_host/plugins/
attacker) under a real core's supervisor, sandboxed.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

from naga.constants import MAX_PLUGIN_CALLS_IN_FLIGHT
from naga.sdk import Client
from naga.sdk import errors as sdk_errors
from naga.v1 import core_pb2 as cpb
from naga.v1 import plugin_service_pb2 as spb
from tests.daemon.conftest import InProcessCore
from tests.plugin_host.conftest import READY_S, fails, fresh, history_text, plugin

Case = tuple[str, dict[str, object], type[sdk_errors.SdkError], str]

CASES: dict[str, Case] = {
    "segfault via ctypes": (
        "attacker.attack",
        {"name": "segfault"},
        sdk_errors.PluginUnavailable,
        "crashed (SIGSEGV)",
    ),
    "forbidden syscall": (
        "attacker.attack",
        {"name": "execve_shell"},
        sdk_errors.PluginUnavailable,
        "killed by the seccomp filter",
    ),
    "infinite loop": (
        "attacker.attack",
        {"name": "cpu_spin"},
        sdk_errors.DeadlineExceeded,
        "ran past its call timeout of 3 s",
    ),
    "SIGSTOP": (
        "attacker.stop",
        {},
        sdk_errors.PluginUnavailable,
        "found stopped",
    ),
    "slow leak": (
        "attacker.leak",
        {"step_mib": 4},
        sdk_errors.PluginUnavailable,
        "memory ceiling exceeded",
    ),
    "heartbeat unanswered": (
        "attacker.hold_gil",
        {"seconds": 30},
        sdk_errors.PluginUnavailable,
        "hung: no answer to a heartbeat",
    ),
    "exit": ("attacker.exit", {"code": 3}, sdk_errors.PluginUnavailable, "exited with code 3"),
}
BAD_FRAMES = {
    "oversize": "a frame announces 2147483648 bytes",
    "garbage": "a frame is not a valid PluginToCore message",
    "empty": "a PluginToCore frame carries no message",
    "unknown_call": "an answer to call 1000000000, which was never made",
    "second_hello": "a second Hello",
    "bad_json": "the result of call 1 is not valid JSON",
    "bad_error_kind": "a ToolError for call 1 of unknown kind 99",
    "progress_unknown_call": "progress for call 1000000000, which was never made",
}


def _core_serves(client: Client) -> None:
    status = client.status()
    assert status.processes[0].role == "core"
    assert status.processes[0].pid == os.getpid()  # the core is this test process


def _contained(client: Client, tool: str, args: dict[str, object], error: type, said: str) -> None:
    before = fresh(client, "attacker")
    failure = fails(client.invoke, "attacker", tool, args, timeout=20)
    assert isinstance(failure, error), failure
    assert said in str(failure), failure
    assert "attacker" in str(failure)
    _core_serves(client)
    # The next call reaches a rebuilt worker.
    answer = client.invoke("attacker", "attacker.echo", {"text": "again"}, timeout=READY_S)
    assert isinstance(answer, dict)
    assert answer["text"] == "again"
    assert answer["pid"] != before.pid
    after = plugin(client, "attacker")
    assert after.state == spb.PLUGIN_STATE_RUNNING
    assert after.restarts == 1
    assert said in after.last_failure
    assert not os.path.exists(f"/proc/{before.pid}")
    # The restart and its cause are a ledger entry (irreversible: it happened).
    restarts = [d for d in history_text(client) if d.startswith("supervisor: restart plugin")]
    assert any(f"worker pid {before.pid}: " in d and said in d for d in restarts), restarts


@pytest.mark.parametrize("case", CASES, ids=CASES.keys())
def test_trouble_is_contained_and_the_worker_rebuilt(client: Client, case: str) -> None:
    _contained(client, *CASES[case])


@pytest.mark.parametrize("kind", BAD_FRAMES, ids=BAD_FRAMES.keys())
def test_a_bad_frame_kills_that_worker_never_the_core(client: Client, kind: str) -> None:
    _contained(
        client,
        "attacker.bad_frame",
        {"kind": kind},
        sdk_errors.PluginUnavailable,
        f"protocol violation: {BAD_FRAMES[kind]}",
    )


def test_progress_after_the_answer_kills_that_worker(client: Client) -> None:
    before = fresh(client, "attacker")
    client.invoke("attacker", "attacker.echo", {"text": "call 1"}, timeout=READY_S)
    failure = fails(
        client.invoke, "attacker", "attacker.bad_frame", {"kind": "progress_answered"}, timeout=20
    )
    said = "protocol violation: progress for call 1, which it already answered"
    assert isinstance(failure, sdk_errors.PluginUnavailable), failure
    assert said in str(failure), failure
    answer = client.invoke("attacker", "attacker.echo", {"text": "again"}, timeout=READY_S)
    assert isinstance(answer, dict)
    assert answer["pid"] != before.pid


def test_progress_nobody_takes_is_dropped_and_the_call_answers(client: Client) -> None:
    before = fresh(client, "attacker")
    answer = client.invoke("attacker", "attacker.chatter", {"frames": 2000}, timeout=READY_S)
    assert answer == {"sent": 2000}
    after = plugin(client, "attacker")
    assert (after.pid, after.restarts) == (before.pid, 0)


def test_status_lists_the_worker_and_its_restarts(client: Client) -> None:
    info = fresh(client, "attacker")
    fails(client.invoke, "attacker", "attacker.exit", {"code": 9}, timeout=20)
    client.invoke("attacker", "attacker.echo", {"text": "x"}, timeout=READY_S)
    rows = {p.role: p for p in client.status().processes}
    row = rows["plugin:attacker"]
    assert row.state == cpb.PROCESS_STATE_RUNNING
    assert row.pid not in (0, info.pid)
    assert row.restarts == 1
    assert "exited with code 9" in row.detail
    status = Path(f"/proc/{row.pid}/status").read_text()
    assert "Seccomp:\t2\n" in status
    assert "NoNewPrivs:\t1\n" in status


def test_a_crash_loop_is_damped_until_enabled_again(client: Client) -> None:
    fresh(client, "attacker")
    for attempt in range(3):  # FAST: three failures within a minute are a loop
        failure = fails(client.invoke, "attacker", "attacker.exit", {"code": 1}, timeout=READY_S)
        assert isinstance(failure, sdk_errors.PluginUnavailable), failure
        # Each caller hears the supervisor's verdict on the death it saw,
        # and the plugin's state already says the same when it does.
        if attempt < 2:
            assert "it is being rebuilt" in str(failure), failure
        else:
            assert "the plugin failed: crash loop: 3 failures" in str(failure), failure
            assert "naga plugin enable attacker" in str(failure), failure
    info = plugin(client, "attacker")
    assert info.state == spb.PLUGIN_STATE_FAILED
    assert "crash loop: 3 failures within 60 s" in info.last_failure
    assert info.pid == 0
    refused = fails(client.invoke, "attacker", "attacker.echo", {"text": "x"})
    assert isinstance(refused, sdk_errors.FailedPrecondition)
    assert "crash loop" in str(refused)
    assert "naga plugin enable attacker" in str(refused)
    assert any("component plugin.attacker crashed: crash loop" in d for d in history_text(client))
    # Not restarted by itself; the owner's enable retries it.
    again = client.enable_plugin("attacker", wait=READY_S)
    assert again.changed
    assert again.plugin.state == spb.PLUGIN_STATE_RUNNING
    answer = client.invoke("attacker", "attacker.echo", {"text": "back"})
    assert isinstance(answer, dict)
    assert answer["text"] == "back"


def test_code_that_does_not_match_its_manifest_fails_clearly(client: Client) -> None:
    resp = client.enable_plugin("mismatch", wait=READY_S)
    assert resp.plugin.state == spb.PLUGIN_STATE_FAILED
    assert "exited with code 78 before its Hello" in resp.plugin.last_failure
    assert "does not match its manifest" in resp.plugin.last_failure
    client.disable_plugin("mismatch")


def test_a_caller_timeout_leaves_the_worker_alone(client: Client) -> None:
    info = fresh(client, "attacker")
    # hold_gil for 1 s, the caller waits 0.3 s: its call ends, the worker lives.
    failure = fails(client.invoke, "attacker", "attacker.hold_gil", {"seconds": 1}, timeout=0.3)
    assert isinstance(failure, sdk_errors.DeadlineExceeded)
    assert "caller's timeout" in str(failure)
    answer = client.invoke("attacker", "attacker.echo", {"text": "still"}, timeout=READY_S)
    assert answer == {"text": "still", "pid": info.pid}
    assert plugin(client, "attacker").restarts == 0


def test_calls_in_flight_are_capped_and_the_core_answers_meanwhile(
    host_core: InProcessCore, client: Client
) -> None:
    fresh(client, "attacker")
    work = Path(host_core.info.home, "work", "plugins", "attacker")
    for fifo in ("arrived", "gate"):
        with contextlib.suppress(FileNotFoundError):
            (work / fifo).unlink()
        os.mkfifo(work / fifo)
    # Read-write ends: opening never blocks, reading never sees EOF.
    arrived = os.open(work / "arrived", os.O_RDWR)
    gate = os.open(work / "gate", os.O_RDWR)
    results: list[object] = []
    callers = [
        threading.Thread(
            target=lambda: results.append(
                client.invoke("attacker", "attacker.rendezvous", timeout=READY_S)
            )
        )
        for _ in range(MAX_PLUGIN_CALLS_IN_FLIGHT)
    ]
    try:
        for caller in callers:
            caller.start()
        for _ in callers:
            assert os.read(arrived, 1) == b"x"  # every call is inside the worker now
        refused = fails(client.invoke, "attacker", "attacker.echo", {"text": "one more"})
        assert isinstance(refused, sdk_errors.ResourceExhausted)
        assert f"{MAX_PLUGIN_CALLS_IN_FLIGHT} plugin calls are in flight" in str(refused)
        _core_serves(client)  # the core still answers everything else
    finally:
        os.write(gate, b"x" * len(callers))
        for caller in callers:
            caller.join(READY_S)
        os.close(arrived)
        os.close(gate)
    assert results == ["passed"] * len(callers)
    assert plugin(client, "attacker").restarts == 0
