"""The server's life cycle, with stand-in servers (tests/localmodel/_standin.py)
run by the real launcher in the real ``model_server`` sandbox: readiness, the
ways of failing to become ready, stopping (SIGTERM, then SIGKILL), dying
with the parent, and the sandbox it runs in."""

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

import sandbox
from naga_core import _localmodel
from naga_core._localmodel import (
    LocalModelEndpoint,
    LocalModelError,
    LocalModelExited,
    LocalModelNotReady,
    LocalModelSandboxFailed,
    LocalModelSettings,
    ModelMissing,
    local_model,
    loopback_listener,
    serve_local_model,
)
from naga_core.supervisor import proc_status

REPO = Path(__file__).resolve().parents[2]
STANDIN = "tests.localmodel._standin"


def _settings(tmp_path: Path, mode: str, **overrides: Any) -> LocalModelSettings:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    model = models / "fake.gguf"
    model.write_bytes(b"GGUF")
    base = LocalModelSettings(
        model_path=model,
        model_name="fake-model",
        server_target=f"{STANDIN}:{mode}",
        log_path=tmp_path / "server.log",
        work_dir=tmp_path / "work",
        ready_timeout_s=30.0,
    )
    return dataclasses.replace(base, **overrides)


def _gone(pidfd: int, timeout_s: float) -> bool:
    """Whether the process behind ``pidfd`` has exited, waiting up to ``timeout_s``."""
    readable, _, _ = select.select([pidfd], [], [], timeout_s)
    return bool(readable)


def test_ready_when_the_model_is_listed_sandboxed_and_stopped_on_exit(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    async def main() -> tuple[LocalModelEndpoint, int, dict[str, object], dict[str, str]]:
        async with local_model(_settings(tmp_path, "answer"), forker) as endpoint:
            pidfd = os.pidfd_open(endpoint.pid)
            status = proc_status(endpoint.pid)
            namespaces = _namespaces(endpoint.pid)
            async with httpx.AsyncClient(trust_env=False) as client:
                listed = (await client.get(f"{endpoint.base_url}/models")).json()
            assert not _gone(pidfd, 0)
        # Its own network and mount namespaces (as root, no user namespace).
        assert namespaces["net"] != os.readlink("/proc/self/ns/net")
        assert namespaces["mnt"] != os.readlink("/proc/self/ns/mnt")
        return endpoint, pidfd, listed, status

    endpoint, pidfd, listed, status = trio.run(main)
    try:
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        assert endpoint.base_url.endswith("/v1")
        assert endpoint.model == "fake-model"
        assert endpoint.started_ns > 0
        assert endpoint.degraded == ()
        assert listed["data"] == [{"id": "fake-model"}]
        assert (status["Seccomp"], status["NoNewPrivs"]) == ("2", "1")
        assert _gone(pidfd, 0), "the server outlived its block"
        assert "standin answering" in endpoint.log_path.read_text()
        assert endpoint.log_path.stat().st_mode & 0o777 == 0o600
    finally:
        os.close(pidfd)


def test_a_server_that_never_answers_times_out_with_its_log(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    settings = _settings(tmp_path, "silent", ready_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(LocalModelNotReady) as caught:
        trio.run(_enter, settings, forker)
    elapsed = time.monotonic() - started
    assert elapsed < 10, "the deadline held although the server accepted connections"
    assert "did not answer GET http://127.0.0.1:" in str(caught.value)
    assert "within 1 s" in str(caught.value)
    assert "standin silent on" in str(caught.value), "the log tail is in the error"


def test_a_server_that_exits_reports_its_status_and_log(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    with pytest.raises(LocalModelExited) as caught:
        trio.run(_enter, _settings(tmp_path, "exit_"), forker)
    assert caught.value.returncode == 3
    assert "exited with code 3" in str(caught.value)
    assert "cannot load the model (on purpose)" in str(caught.value)


def test_a_crash_while_serving_reaches_the_supervisor(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    settings = _settings(tmp_path, "answer")

    async def supervisor() -> None:
        async with trio.open_nursery() as nursery:
            endpoint: LocalModelEndpoint = await nursery.start(serve_local_model, settings, forker)
            os.kill(endpoint.pid, signal.SIGKILL)
            with trio.fail_after(30):  # a missed crash fails instead of hanging
                await trio.sleep_forever()  # the crash cancels this

    with pytest.RaisesGroup(
        pytest.RaisesExc(LocalModelExited, check=lambda e: e.returncode == -signal.SIGKILL)
    ):
        trio.run(supervisor)


def test_a_server_ignoring_sigterm_is_killed_after_the_grace(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    async def main() -> int:
        async with local_model(
            _settings(tmp_path, "stubborn", stop_grace_s=0.3), forker
        ) as endpoint:
            return os.pidfd_open(endpoint.pid)

    pidfd = trio.run(main)
    try:
        assert _gone(pidfd, 0)
    finally:
        os.close(pidfd)


def test_the_server_dies_with_its_parent(tmp_path: Path) -> None:
    # A parent killed outright cannot stop its child: the lifeline must.
    settings = _settings(tmp_path, "answer")
    script = (
        "import trio\n"
        "from pathlib import Path\n"
        "import sandbox\n"
        "from naga_core._localmodel import LocalModelSettings, local_model\n"
        "async def main(forker):\n"
        f"    s = LocalModelSettings(model_path=Path({str(settings.model_path)!r}),\n"
        f"        model_name='fake-model', server_target={STANDIN + ':answer'!r})\n"
        "    async with local_model(s, forker) as endpoint:\n"
        "        print(endpoint.pid, flush=True)\n"
        "        await trio.sleep_forever()\n"
        "with sandbox.Forker() as forker:\n"
        "    trio.run(main, forker)\n"
    )
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


def test_the_server_outlives_the_thread_that_launched_it(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    # trio launches from worker threads that retire when idle; a child tied
    # to its parent *thread* (PR_SET_PDEATHSIG) died with it.
    settings = _settings(tmp_path, "answer")
    work_dir, log_path = tmp_path / "work", tmp_path / "server.log"
    work_dir.mkdir()
    launched: list[sandbox.Sandboxed] = []
    lifeline_r, lifeline_w = os.pipe()
    listener = loopback_listener()
    log = log_path.open("ab")

    def spawn() -> None:
        launched.append(
            _localmodel._launch(  # pyright: ignore[reportPrivateUsage]
                settings,
                forker,
                work_dir=work_dir,
                listener=listener,
                lifeline=lifeline_r,
                log=log,
                log_path=log_path,
            )
        )

    spawner = threading.Thread(target=spawn)
    spawner.start()
    spawner.join()
    (server,) = launched
    try:
        assert server.pidfd is not None
        assert not _gone(server.pidfd, 1.0), "the server died with the thread that launched it"
    finally:
        server.kill()
        for fd in (lifeline_r, lifeline_w):
            os.close(fd)
        listener.close()
        log.close()


def test_a_missing_model_says_to_run_make(tmp_path: Path, forker: sandbox.Forker) -> None:
    settings = _settings(tmp_path, "answer", model_path=tmp_path / "absent.gguf")
    with pytest.raises(ModelMissing, match="run `make`"):
        trio.run(_enter, settings, forker)


def test_a_missing_server_package_says_to_run_make(tmp_path: Path, forker: sandbox.Forker) -> None:
    settings = _settings(tmp_path, "answer", server_target="naga_no_such_server:main")
    with pytest.raises(LocalModelError, match=r"needs naga_no_such_server, which is not installed"):
        trio.run(_enter, settings, forker)


def test_a_target_that_cannot_be_imported_fails_at_its_sandbox_layer(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    settings = _settings(tmp_path, "answer", server_target="tests.localmodel._absent:main")
    with pytest.raises(LocalModelSandboxFailed) as caught:
        trio.run(_enter, settings, forker)
    message = str(caught.value)
    assert "at layer target" in message
    assert "ModuleNotFoundError" in message
    assert "run `make`" in message


def test_a_kernel_without_landlock_is_refused_unless_degraded_is_allowed(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    weak = dataclasses.replace(sandbox.detect(), landlock_abi=0)
    with pytest.raises(LocalModelSandboxFailed, match=r"cannot be sandboxed.*landlock_fs"):
        trio.run(_enter, _settings(tmp_path, "answer", kernel=weak), forker)


def test_the_server_gets_a_scrubbed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forker: sandbox.Forker
) -> None:
    # llama-cpp-python reads settings such as API_KEY from its environment.
    monkeypatch.setenv("API_KEY", "from-the-owner-shell")
    monkeypatch.setenv("N_GPU_LAYERS", "99")

    async def main() -> dict[str, object]:
        async with (
            local_model(_settings(tmp_path, "answer"), forker) as endpoint,
            httpx.AsyncClient(trust_env=False) as client,
        ):
            return (await client.get(f"{endpoint.base_url}/models")).json()

    env = trio.run(main)["env"]
    assert isinstance(env, list)
    assert "API_KEY" not in env
    assert "N_GPU_LAYERS" not in env
    assert "OMP_WAIT_POLICY" in env


async def _enter(settings: LocalModelSettings, forker: sandbox.Forker) -> None:
    async with local_model(settings, forker):
        pass


def test_the_unprivileged_path_serves_the_inherited_socket_too(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    # Without root the child enters a user namespace with its network one;
    # the socket the core bound still belongs to the host's network.
    unprivileged = dataclasses.replace(sandbox.detect(), root=False)

    async def main() -> tuple[dict[str, object], dict[str, str]]:
        async with (
            local_model(_settings(tmp_path, "answer", kernel=unprivileged), forker) as endpoint,
            httpx.AsyncClient(trust_env=False) as client,
        ):
            listed = (await client.get(f"{endpoint.base_url}/models")).json()
            return listed, _namespaces(endpoint.pid)

    listed, namespaces = trio.run(main)
    assert listed["data"] == [{"id": "fake-model"}]
    assert namespaces["user"] != os.readlink("/proc/self/ns/user")
    assert namespaces["net"] != os.readlink("/proc/self/ns/net")


def _namespaces(pid: int) -> dict[str, str]:
    return {ns: os.readlink(f"/proc/{pid}/ns/{ns}") for ns in ("user", "net", "mnt")}


_CGROUPS = sandbox.detect_cgroups()


def _own_cgroups(pid: int) -> dict[str, str]:
    """controller -> the cgroup path of ``pid`` (v2: "")."""
    with open(f"/proc/{pid}/cgroup", encoding="ascii") as f:
        rows = [line.rstrip("\n").split(":", 2) for line in f]
    return {name: path for _, names, path in rows for name in (names.split(",") if names else [""])}


def _limits_of(pid: int) -> tuple[dict[str, str], dict[str, str]]:
    """The limits of ``pid``'s own naga cgroup, and its directories."""
    paths = _own_cgroups(pid)
    v1 = _CGROUPS.version is sandbox.CgroupVersion.V1
    name = os.path.basename(paths["cpu" if v1 else ""])
    assert name.startswith("naga-local-model-"), paths
    assert _CGROUPS.cpu_parent is not None
    assert _CGROUPS.memory_parent is not None
    cpu = os.path.join(_CGROUPS.cpu_parent, name)
    memory = os.path.join(_CGROUPS.memory_parent, name)
    pids = os.path.join(_CGROUPS.pids_parent or cpu, name)
    files = (
        {"quota": (cpu, "cpu.cfs_quota_us"), "memory": (memory, "memory.limit_in_bytes")}
        if v1
        else {"quota": (cpu, "cpu.max"), "memory": (memory, "memory.max")}
    )
    if _CGROUPS.pids_parent is not None:
        files["tasks"] = (pids, "pids.max")
    limits = {k: Path(d, f).read_text().strip() for k, (d, f) in files.items()}
    return limits, {"cpu": cpu, "memory": memory, "pids": pids}


@pytest.mark.skipif(not _CGROUPS.usable, reason=_CGROUPS.line())
def test_the_server_runs_in_a_cgroup_of_its_own_with_its_limits(
    tmp_path: Path, forker: sandbox.Forker
) -> None:
    settings = _settings(tmp_path, "answer", n_threads=2, memory_limit_bytes=2 << 30)

    async def main() -> tuple[dict[str, str], dict[str, str]]:
        async with local_model(settings, forker) as endpoint:
            return _limits_of(endpoint.pid)

    limits, dirs = trio.run(main)
    quota = "200000" if _CGROUPS.version is sandbox.CgroupVersion.V1 else "200000 100000"
    assert limits["quota"] == quota, limits  # its two threads' CPUs
    assert limits["memory"] == str(2 << 30), limits  # its address-space limit
    if _CGROUPS.pids_parent is not None:
        assert limits["tasks"] == str(settings.max_tasks), limits
    # Gone with the server.
    assert not any(os.path.exists(d) for d in dirs.values()), dirs
