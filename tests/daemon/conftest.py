"""Real cores for the daemon tests: in this process (a trio loop on its own
thread, as the CLI's foreground core runs it) or as a child process; homes
short enough for a Unix socket path."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from naga.sdk import Client
from naga_core._home import Home
from naga_core.daemon import CoreConfig, CoreExit, CoreInfo, serve_core

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0


@pytest.fixture
def home() -> Iterator[str]:
    """A fresh home under /tmp (pytest's tmp_path can be too long for sun_path)."""
    root = tempfile.mkdtemp(prefix="naga-t-")
    try:
        yield os.path.join(root, "home")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class InProcessCore:
    """A core serving on a trio loop in a thread of this process."""

    info: CoreInfo
    token: trio.lowlevel.TrioToken
    cancel: trio.CancelScope
    thread: threading.Thread
    ended: list[CoreExit | BaseException] = field(default_factory=lambda: [])

    def client(self, **kw: object) -> Client:
        return Client.connect(self.info.home, **kw)  # type: ignore[arg-type]

    def join(self) -> CoreExit:
        """Wait until the core stopped (after Shutdown) and return how it ended."""
        self.thread.join(READY_TIMEOUT_S)
        assert not self.thread.is_alive(), "the core did not stop"
        (result,) = self.ended
        if isinstance(result, BaseException):
            raise result
        return result


@contextlib.contextmanager
def core_in_thread(home: str, **config: object) -> Generator[InProcessCore]:
    """Serve ``home`` in a thread; on exit, cancel it if it still runs. The
    shipped tools are not enabled on these fresh homes unless asked
    (``default_tools=True``): most tests start from an empty ledger."""
    config.setdefault("default_tools", False)
    started = threading.Event()
    box: dict[str, object] = {}
    ended: list[CoreExit | BaseException] = []

    def run() -> None:
        async def main() -> None:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:

                    async def serve(*, task_status: trio.TaskStatus[CoreInfo]) -> None:
                        cfg = CoreConfig(Home(home), **config)  # type: ignore[arg-type]
                        ended.append(await serve_core(cfg, task_status=task_status))

                    box["info"] = await nursery.start(serve)
                    box["token"] = trio.lowlevel.current_trio_token()
                    box["scope"] = scope
                    started.set()

        try:
            trio.run(main)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread, re-raised there
            ended.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=run, name="naga-test-core")
    thread.start()
    started.wait(READY_TIMEOUT_S)
    if "info" not in box:
        thread.join()
        raise (
            ended[0]
            if ended and isinstance(ended[0], BaseException)
            else AssertionError("the core did not start")
        )
    core = InProcessCore(
        box["info"],  # type: ignore[arg-type]
        box["token"],  # type: ignore[arg-type]
        box["scope"],  # type: ignore[arg-type]
        thread,
        ended,
    )
    try:
        yield core
    finally:
        if thread.is_alive():
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(core.cancel.cancel, trio_token=core.token)
            thread.join(READY_TIMEOUT_S)


@dataclass
class CoreProcess:
    """``naga daemon start --foreground`` as a child process."""

    proc: subprocess.Popen[bytes]
    home: str
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_core_process(home: str, log: Path, *, gateway_port: int | None = None) -> CoreProcess:
    """Start a core and return once it serves (its readiness pipe said so);
    with its gateway on ``gateway_port``, else without one (the default port
    belongs to the machine, not to the tests)."""
    read_end, write_end = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "naga_core.cli",
                "daemon",
                "start",
                "--foreground",
                "--home",
                home,
                "--ready-fd",
                str(write_end),
                *(
                    ["--gateway-port", str(gateway_port)]
                    if gateway_port is not None
                    else ["--no-gateway"]
                ),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            pass_fds=(write_end,),
            env=env,
            cwd=REPO,
        )
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], READY_TIMEOUT_S)
        said = os.read(read_end, 16) if ready else b""
    finally:
        os.close(read_end)
    core = CoreProcess(proc, home, log)
    if said != b"ready\n":
        proc.kill()
        proc.wait()
        raise AssertionError(f"the core did not start:\n{core.output()}")
    return core


@pytest.fixture
def core_process(home: str, tmp_path: Path) -> Iterator[CoreProcess]:
    core = start_core_process(home, tmp_path / "core.log")
    try:
        yield core
    finally:
        if core.proc.poll() is None:
            core.proc.kill()
            core.proc.wait()
