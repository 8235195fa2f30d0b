"""The server's life cycle, with stand-in servers (tests/localmodel/_standin.py)
run by the real launcher: readiness, the two ways of failing to become
ready, stopping (SIGTERM, then SIGKILL), and dying with the parent."""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from naga_core._localmodel import (
    LocalModelEndpoint,
    LocalModelError,
    LocalModelExited,
    LocalModelNotReady,
    LocalModelSettings,
    ModelMissing,
    free_loopback_port,
    local_model,
    serve_local_model,
    server_command,
)

REPO = Path(__file__).resolve().parents[2]
STANDIN = "tests.localmodel._standin"


def _settings(tmp_path: Path, mode: str, **overrides: Any) -> LocalModelSettings:
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    base = LocalModelSettings(
        model_path=model,
        model_name="fake-model",
        server_module=STANDIN,
        extra_env={"PYTHONPATH": str(REPO), "NAGA_STANDIN": mode},
        log_path=tmp_path / "server.log",
        ready_timeout_s=30.0,
    )
    return dataclasses.replace(base, **overrides)


def _gone(pidfd: int, timeout_s: float) -> bool:
    """Whether the process behind ``pidfd`` has exited, waiting up to ``timeout_s``."""
    readable, _, _ = select.select([pidfd], [], [], timeout_s)
    return bool(readable)


def test_ready_when_the_model_is_listed_and_stopped_on_exit(tmp_path: Path) -> None:
    async def main() -> tuple[LocalModelEndpoint, int, dict[str, object]]:
        async with local_model(_settings(tmp_path, "answer")) as endpoint:
            pidfd = os.pidfd_open(endpoint.pid)
            async with httpx.AsyncClient(trust_env=False) as client:
                listed = (await client.get(f"{endpoint.base_url}/models")).json()
            assert not _gone(pidfd, 0)
        return endpoint, pidfd, listed

    endpoint, pidfd, listed = trio.run(main)
    try:
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        assert endpoint.base_url.endswith("/v1")
        assert endpoint.model == "fake-model"
        assert listed["data"] == [{"id": "fake-model"}]
        assert _gone(pidfd, 0), "the server outlived its block"
        assert "standin answering" in endpoint.log_path.read_text()
    finally:
        os.close(pidfd)


def test_a_server_that_never_answers_times_out_with_its_log(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "silent", ready_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(LocalModelNotReady) as caught:
        trio.run(_enter, settings)
    elapsed = time.monotonic() - started
    assert "did not answer GET http://127.0.0.1:" in str(caught.value)
    assert "within 1 s" in str(caught.value)
    assert "standin silent on" in str(caught.value), "the log tail is in the error"
    assert elapsed < 10, "the deadline held although the server accepted connections"


def test_a_server_that_exits_reports_its_status_and_log(tmp_path: Path) -> None:
    with pytest.raises(LocalModelExited) as caught:
        trio.run(_enter, _settings(tmp_path, "exit"))
    assert caught.value.returncode == 3
    assert "exited with status 3" in str(caught.value)
    assert "cannot load the model (on purpose)" in str(caught.value)


def test_a_crash_while_serving_reaches_the_supervisor(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "answer")

    async def supervisor() -> None:
        async with trio.open_nursery() as nursery:
            endpoint: LocalModelEndpoint = await nursery.start(serve_local_model, settings)
            os.kill(endpoint.pid, signal.SIGKILL)
            with trio.fail_after(30):  # a missed crash fails instead of hanging
                await trio.sleep_forever()  # the crash cancels this

    with pytest.RaisesGroup(
        pytest.RaisesExc(LocalModelExited, check=lambda e: e.returncode == -signal.SIGKILL)
    ):
        trio.run(supervisor)


def test_a_server_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    async def main() -> int:
        async with local_model(_settings(tmp_path, "stubborn", stop_grace_s=0.3)) as endpoint:
            return os.pidfd_open(endpoint.pid)

    pidfd = trio.run(main)
    try:
        assert _gone(pidfd, 0)
    finally:
        os.close(pidfd)


def test_the_server_dies_with_its_parent(tmp_path: Path) -> None:
    # A parent killed outright cannot stop its child: the child's watch must.
    script = (
        "import sys, trio\n"
        "from pathlib import Path\n"
        "from naga_core._localmodel import LocalModelSettings, local_model\n"
        "async def main():\n"
        f"    s = LocalModelSettings(model_path=Path({str(tmp_path / 'fake.gguf')!r}),\n"
        f"        model_name='fake-model', server_module={STANDIN!r},\n"
        f"        extra_env={{'PYTHONPATH': {str(REPO)!r}, 'NAGA_STANDIN': 'answer'}})\n"
        "    async with local_model(s) as endpoint:\n"
        "        print(endpoint.pid, flush=True)\n"
        "        await trio.sleep_forever()\n"
        "trio.run(main)\n"
    )
    (tmp_path / "fake.gguf").write_bytes(b"GGUF")
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        pidfd = os.pidfd_open(child_pid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    try:
        assert _gone(pidfd, 20), "the server outlived its killed parent"
    finally:
        os.close(pidfd)


def test_the_server_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    # trio starts processes from worker threads that retire when idle; a
    # child tied to its parent *thread* (PR_SET_PDEATHSIG) died with it.
    settings = _settings(tmp_path, "answer")
    started: list[subprocess.Popen[bytes]] = []

    def spawn() -> None:
        server = subprocess.Popen(
            server_command(settings, free_loopback_port()),
            stdout=subprocess.PIPE,
            env={**os.environ, **settings.extra_env},
        )
        started.append(server)
        # The thread lives until the child has started serving, as trio's
        # worker does, so any tie to this thread is in place when it exits.
        assert server.stdout is not None
        assert b"standin answering" in server.stdout.readline()

    spawner = threading.Thread(target=spawn)
    spawner.start()
    spawner.join()
    (server,) = started
    try:
        pidfd = os.pidfd_open(server.pid)
        try:
            assert not _gone(pidfd, 1.0), "the server died with the thread that spawned it"
        finally:
            os.close(pidfd)
    finally:
        server.kill()
        server.wait()


def test_a_missing_model_says_to_run_make(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "answer", model_path=tmp_path / "absent.gguf")
    with pytest.raises(ModelMissing, match="run `make`"):
        trio.run(_enter, settings)


def test_a_missing_server_package_says_to_run_make(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "answer", server_module="naga_no_such_server")
    with pytest.raises(LocalModelError, match=r"not installed .*run `make`"):
        trio.run(_enter, settings)


def test_the_server_gets_a_scrubbed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama-cpp-python reads settings such as API_KEY from its environment.
    monkeypatch.setenv("API_KEY", "from-the-owner-shell")

    async def main() -> dict[str, object]:
        async with (
            local_model(_settings(tmp_path, "answer")) as endpoint,
            httpx.AsyncClient(trust_env=False) as client,
        ):
            return (await client.get(f"{endpoint.base_url}/models")).json()

    env = trio.run(main)["env"]
    assert isinstance(env, list)
    assert "API_KEY" not in env
    assert "NAGA_STANDIN" in env


async def _enter(settings: LocalModelSettings) -> None:
    async with local_model(settings):
        pass
