"""``naga daemon start [--foreground] | stop | status | restart-gateway``.

``start`` without ``--foreground`` runs ``naga daemon start --foreground``
detached (its own session, output appended to ``run/core.log``) and waits
for it to say it is serving on an inherited pipe: readiness, not polling.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any, cast

import trio

from naga.sdk import Client
from naga.sdk.errors import CoreUnavailable, SdkError
from naga.v1 import core_pb2 as cpb
from naga_core._home import Home
from naga_core._sdnotify import take_notify_environ
from naga_core.agent import LOCAL_MODEL_ROLE
from naga_core.cli._console_cmds import login_line
from naga_core.cli._output import Outcome
from naga_core.daemon import (
    LOG_FORMAT,
    CoreConfig,
    CoreExit,
    CoreInfo,
    GatewayOptions,
    RunDir,
    log_to_run_dir,
    running_pid,
    serve_core,
)
from naga_core.errors import NagaError

#: How long ``start`` waits for a detached core to serve, and ``stop`` for it to exit.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
_READY = b"ready\n"
_LOG_TAIL_LINES = 20

#: ``naga daemon status`` exit code when no core runs (LSB: "program is not running").
NOT_RUNNING = 3


class DaemonStartFailed(NagaError):
    """A detached core did not come up; the message carries its log's tail."""


def _gateway_options(args: argparse.Namespace) -> GatewayOptions:
    no_gateway: bool = args.no_gateway
    port: int | None = args.gateway_port
    return GatewayOptions(enabled=not no_gateway, port=port)


def start(args: argparse.Namespace, home: Home) -> Outcome:
    gateway = _gateway_options(args)
    if args.foreground:
        return _foreground(home, args.ready_fd, gateway)
    pid = running_pid(home)
    if pid is not None:
        rd = RunDir(home)
        return Outcome(
            0,
            {"running": True, "pid": pid, "socket": rd.socket_path, "started": False},
            [f"naga-core is already running (pid {pid}) on {rd.socket_path}"],
        )
    return _detached(home, gateway)


def _foreground(home: Home, ready_fd: int | None, gateway: GatewayOptions) -> Outcome:
    # The level is in the line: the console's logs page filters by it.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    run_dir = RunDir(home)
    run_dir.prepare()
    log_to_run_dir(run_dir.log_path)
    # Read systemd's notify variables and take them out of the environment
    # the core's children will inherit.
    notify = take_notify_environ(os.environ)
    config = CoreConfig(
        home,
        handle_signals=True,
        notifier=notify.notifier,
        watchdog_ns=notify.watchdog_ns,
        gateway=gateway,
    )
    ended: list[CoreExit] = []

    async def run(*, task_status: trio.TaskStatus[CoreInfo]) -> None:
        ended.append(await serve_core(config, task_status=task_status))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            info: CoreInfo = await nursery.start(run)
            # Asked over the socket from a thread: the core answers on this loop.
            login = await trio.to_thread.run_sync(login_line, home, info.webchat_url)
            for line in _serving_lines(info, gateway, login):
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
            if ready_fd is not None:
                os.write(ready_fd, _READY)
                os.close(ready_fd)

    try:
        trio.run(main)
    except BaseExceptionGroup as group:
        # trio's nurseries group what they raise; a core that could not
        # start failed for one reason, which the CLI reports as its message.
        raise _sole(group) from None
    (done,) = ended
    data = {"stopped": True, "reason": done.reason, "failed": done.failed}
    return Outcome(1 if done.failed else 0, data, [f"naga-core stopped: {done.reason}"])


def _sole(exc: BaseException) -> BaseException:
    """The one exception inside nested groups, else the group itself."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    group = cast("BaseExceptionGroup[BaseException]", exc)
    return _sole(group.exceptions[0]) if len(group.exceptions) == 1 else group


def _serving_lines(info: CoreInfo, gateway: GatewayOptions, login: str) -> list[str]:
    lines = [
        f"naga-core serving on unix:{info.socket} (pid {info.pid})",
        f"home: {info.home}",
    ]
    if info.webchat_url:
        lines.append(login)
    elif gateway.enabled:
        where = "on its port" if gateway.port is None else f"on port {gateway.port}"
        lines.append(
            f"the gateway did not come up {where} "
            "(see `naga daemon status` and run/gateway.log); the core serves without it"
        )
    lines += [
        'Talk to the agent: naga chat "hello"   Inspect: naga daemon status | naga history',
        "Stop with Ctrl-C here or `naga daemon stop`.",
    ]
    return lines


def _detached(home: Home, gateway: GatewayOptions) -> Outcome:
    rd = RunDir(home)
    rd.prepare()
    read_end, write_end = os.pipe()
    try:
        # 0600: the log may name peers and settings; only the owner reads it.
        log_fd = os.open(rd.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with os.fdopen(log_fd, "ab") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "naga_core.cli",
                    "daemon",
                    "start",
                    "--foreground",
                    "--home",
                    home.root,
                    "--ready-fd",
                    str(write_end),
                    *(["--gateway-port", str(gateway.port)] if gateway.port is not None else []),
                    *(["--no-gateway"] if not gateway.enabled else []),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                pass_fds=(write_end,),
            )
        os.close(write_end)
        write_end = -1
        ready, _, _ = select.select([read_end], [], [], START_TIMEOUT_S)
        said = os.read(read_end, len(_READY)) if ready else b""
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    if said != _READY:
        if ready:  # the pipe closed: the core is exiting
            why = "exited before serving"
        else:  # alive but not serving in time: do not leave it half up
            why = f"did not start serving within {START_TIMEOUT_S:.0f} s"
            proc.terminate()
        proc.wait(STOP_TIMEOUT_S)
        raise DaemonStartFailed(
            f"naga-core {why} (exit status {proc.returncode}); the end of {rd.log_path}:\n"
            + _tail(rd.log_path)
        )
    try:  # serving, by its own word; now check that the socket answers
        with Client.connect(home.root) as client:
            client.status()
    except SdkError as exc:
        raise DaemonStartFailed(
            f"naga-core (pid {proc.pid}) said it was serving but does not answer: {exc}; "
            f"the end of {rd.log_path}:\n" + _tail(rd.log_path)
        ) from None
    url = _webchat_url(home) if gateway.enabled else ""
    data = {
        "running": True,
        "pid": proc.pid,
        "socket": rd.socket_path,
        "started": True,
        "webchat_url": url or None,
    }
    lines = [
        f"naga-core started (pid {proc.pid}) on unix:{rd.socket_path}",
        f"log: {rd.log_path}",
    ]
    if url:
        lines.append(login_line(home, url))
    elif gateway.enabled:
        lines.append("the gateway did not come up (see `naga daemon status`)")
    return Outcome(0, data, lines)


def _webchat_url(home: Home) -> str:
    """The console's address if the core's gateway runs (its status row)."""
    try:
        with Client.connect(home.root) as client:
            rows = client.status().processes
    except SdkError:
        return ""
    for row in rows:
        if row.role == "gateway" and row.state == cpb.PROCESS_STATE_RUNNING:
            return row.detail or ""
    return ""


def _tail(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()[-_LOG_TAIL_LINES:]
    except OSError as exc:
        return f"  (cannot read it: {exc})"
    return "\n".join("  " + line for line in lines) or "  (empty)"


def stop(_args: argparse.Namespace, home: Home) -> Outcome:
    pid = running_pid(home)
    if pid is None:
        return Outcome(0, {"running": False, "stopped": False}, ["naga-core is not running"])
    try:
        with Client.connect(home.root) as client:
            client.shutdown("naga daemon stop")
    except SdkError:
        # Holding the home but not answering (starting, or stuck): ask the
        # process directly; it stops the same graceful way.
        if pid:
            os.kill(pid, signal.SIGTERM)
    if pid and not _wait_exit(pid, STOP_TIMEOUT_S):
        raise NagaError(
            f"naga-core (pid {pid}) is still running {STOP_TIMEOUT_S:.0f} s after it was "
            f"asked to stop; see {RunDir(home).log_path} (kill -9 {pid} ends it at once; "
            "the ledger recovers on the next start)"
        )
    return Outcome(
        0, {"running": False, "stopped": True, "pid": pid}, [f"naga-core stopped (pid {pid})"]
    )


def _wait_exit(pid: int, timeout: float) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


_STATE_WORDS = {
    cpb.PROCESS_STATE_STARTING: "starting",
    cpb.PROCESS_STATE_RUNNING: "running",
    cpb.PROCESS_STATE_STOPPING: "stopping",
    cpb.PROCESS_STATE_STOPPED: "stopped",
    cpb.PROCESS_STATE_FAILED: "failed",
}


#: What a row's detail is, by role and state, where it is not a past failure.
_DETAIL_LABELS = {
    ("gateway", "running"): "console",
    (LOCAL_MODEL_ROLE, "running"): "serving",
    (LOCAL_MODEL_ROLE, "stopped"): "ended",
    (LOCAL_MODEL_ROLE, "failed"): "failed",
}


def status(_args: argparse.Namespace, home: Home) -> Outcome:
    try:
        with Client.connect(home.root) as client:
            st = client.status()
    except CoreUnavailable as exc:
        pid = running_pid(home)
        if pid is None:
            data: dict[str, Any] = {"running": False, "processes": []}
            return Outcome(NOT_RUNNING, data, [f"naga-core is not running ({exc.hint})"])
        raise NagaError(
            f"naga-core (pid {pid}) holds {home.root} but does not answer: {exc.detail}"
        ) from None
    processes = [
        {
            "role": p.role,
            "pid": p.pid,
            "state": _STATE_WORDS.get(p.state, "unknown"),
            "started": _iso(p.started_ns) if p.started_ns else None,
            "restarts": p.restarts,
            "detail": p.detail,
        }
        for p in st.processes
    ]
    lines = [f"{'ROLE':<16} {'PID':>7}  {'STATE':<9} {'RESTARTS':>8}  STARTED"]
    for p in processes:
        lines.append(
            f"{p['role']:<16} {p['pid']:>7}  {p['state']:<9} {p['restarts']:>8}  "
            f"{p['started'] or '-'}"
        )
        if p["detail"]:
            label = _DETAIL_LABELS.get((str(p["role"]), str(p["state"])), "last failure")
            lines.append(f"  {label}: {p['detail']}")
    lines += [f"socket: {st.socket}", f"ledger: {st.ledger_size} records"]
    data = {
        "running": True,
        "processes": processes,
        "socket": st.socket,
        "home": st.home,
        "ledger_size": st.ledger_size,
    }
    return Outcome(0, data, lines)


#: ``naga daemon restart-gateway`` exit code when the gateway did not come up.
GATEWAY_DOWN = 1


def restart_gateway(_args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as client:
        answer = client.restart_gateway("naga daemon restart-gateway")
    data: dict[str, Any] = {
        "serving": answer.serving,
        "port": answer.port,
        "url": answer.url,
        "cause": answer.cause,
        "state": _STATE_WORDS.get(answer.gateway.state, "unknown"),
    }
    if answer.serving:
        return Outcome(0, data, [f"gateway restarted: the console is at {answer.url}"])
    return Outcome(
        GATEWAY_DOWN,
        data,
        [
            f"gateway did not come up on port {answer.port}: {answer.cause}",
            "(`naga daemon status` shows what it does next)",
        ],
    )


def _iso(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns / 1e9))


__all__ = ["DaemonStartFailed", "restart_gateway", "start", "status", "stop"]
