"""What ``make run`` (``naga daemon start --foreground``) prints for the
console: on a terminal, a one-time login link that logs in; into a log
file (systemd's journal, a redirect), the bare address and how to get a
link, never a live code (docs/adr/0007-console-owner-proof.md)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from naga_core.cli import main as cli_main
from tests.daemon.conftest import REPO, core_in_thread, home, start_core_process
from tests.gateway._login import login
from tests.gateway._ports import free_ports

__all__ = ["home"]  # the fixture, used by name below

_LINK = re.compile(
    rb"WebChat console \(a one-time login link; `naga console` makes another\): "
    rb"(http://127\.0\.0\.1:(\d+)/#login=([A-Za-z0-9_-]+))"
)


def _read_until(fd: int, pattern: re.Pattern[bytes], seconds: float) -> re.Match[bytes]:
    seen = b""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal's other side closed
            break
        if not chunk:
            break
        seen += chunk
        if (found := pattern.search(seen)) is not None:
            return found
    raise AssertionError(f"no login link in what the terminal showed: {seen!r}")


def test_a_terminal_gets_a_login_link_and_a_log_gets_none(home: str, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    terminal, tty = pty.openpty()
    ready_r, ready_w = os.pipe()
    log = tmp_path / "stderr.log"
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "naga_core.cli", "daemon", "start", "--foreground"),
                *("--home", home, "--ready-fd", str(ready_w), "--gateway-port", str(port)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=tty,
            stderr=err,
            pass_fds=(ready_w,),
            env={**os.environ, "PYTHONPATH": str(REPO)},
            cwd=REPO,
        )
    os.close(tty)
    os.close(ready_w)
    try:
        found = _read_until(terminal, _LINK, 60)
        assert int(found.group(2)) == port
        status, answer = trio.run(login, port, found.group(3).decode())
        assert status == 200, answer
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()
        os.close(terminal)
        os.close(ready_r)

    core = start_core_process(home, tmp_path / "core.log", gateway_port=port)
    try:
        out = core.output()
        assert (
            f"WebChat console: http://127.0.0.1:{port}/ (run `naga console` for a login link)"
            in out
        )
        assert "#login=" not in out
    finally:
        os.kill(core.pid, signal.SIGTERM)
        assert core.proc.wait(60) == 0, core.output()


def test_naga_console_without_a_gateway_says_there_is_no_console(
    home: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with core_in_thread(home):
        capsys.readouterr()
        assert cli_main(["console", "--home", home]) == 1
        said = capsys.readouterr().out
        assert "the core runs no gateway" in said
        assert "#login=" not in said
