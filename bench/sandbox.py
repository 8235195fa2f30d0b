"""Sandboxed worker benchmark: prints one JSON object.

* sandboxed start, ``sandbox.launch`` to the child's ready report, p50/p99
  over ``--starts`` launches of the chosen profile (default plugin);
* the part of a launch that crosses to the owner's fork thread
  (``Forker.run`` of a no-op, p50/p99 microseconds over 2,000), and a
  Forker's start and close (ADR 0062);
* an unsandboxed start of the same interpreter to its first byte on a pipe;
* what each layer costs inside the child (p50, microseconds), as the child
  reports it, and what ``sandbox.detect()`` costs;
* through a real core's plugin host (``--calls``, ``--crashes``; 0 skips):
  a tool call's round trip from an SDK client (p50/p99), the enable of a
  plugin to its first answer, and the time from a worker crash (the caller
  got its error) to the next successful call on the rebuilt worker, with the
  supervisor's default first restart delay included; and the core's RPC
  p50 (Status, from another client) while one plugin floods the core with
  valid frames (progress of a call; Pongs nobody asked for), as a ratio to
  the quiet p50 (``--flood`` seconds each, 0 skips).

    python bench/sandbox.py --starts 50 --calls 2000 --crashes 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

# Run as a script, this file's directory comes first on sys.path, and this
# file (bench/sandbox.py) would shadow the sandbox package it measures.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import sandbox  # noqa: E402
from naga.sdk import Client  # noqa: E402
from naga.sdk.errors import PluginUnavailable, SdkError  # noqa: E402
from naga_core.plugins import code_hash  # noqa: E402
from naga_core.supervisor import RestartPolicy  # noqa: E402

REPO = os.path.dirname(_HERE)
#: A home plugin whose worker can be crashed on request.
CRASHY_MANIFEST = """\
name = "crashy"
version = "1.0.0"
kind = "tool"
description = "Answers, or crashes (bench only)"
entry = "crashy:main"

[[tools]]
name = "crashy.echo"
risk = "R0"
description = "its argument"
[tools.params.text]
type = "string"

[[tools]]
name = "crashy.crash"
risk = "R0"
description = "abort()"
"""
CRASHY_CODE = """\
import os

from naga_plugins import Plugin

plugin = Plugin("crashy")


@plugin.tool("crashy.echo")
def echo(text: str) -> str:
    return text


@plugin.tool("crashy.crash")
def crash() -> str:
    os.abort()


main = plugin.main
"""

#: A home plugin that floods the core with valid frames on request.
FLOODY_MANIFEST = """\
name = "floody"
version = "1.0.0"
kind = "tool"
description = "Floods the core with frames (bench only)"
entry = "floody:main"

[[tools]]
name = "floody.flood"
risk = "R1"  # it writes its flag into its work directory (R0: read-only)
description = "progress frames of this call, or Pongs nobody asked for, for a while"
[tools.params.kind]
type = "string"
[tools.params.seconds]
type = "number"
"""
FLOODY_CODE = """\
import os
import stat
import struct
import time

from naga.v1 import plugin_pb2 as pb
from naga_plugins import Plugin

plugin = Plugin("floody")


def _socket():
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                return fd
        except OSError:
            continue
    raise OSError("no socket")


@plugin.tool("floody.flood")
def flood(kind: str, seconds: float) -> int:
    open(os.path.join(plugin.work_dir(), "flooding"), "wb").close()
    end = time.monotonic() + seconds
    sent = 0
    if kind == "pong":
        body = pb.PluginToCore(pong=pb.Pong(nonce=0)).SerializeToString()
        batch = (struct.pack(">I", len(body)) + body) * 512
        fd = _socket()
        while time.monotonic() < end:
            os.write(fd, batch)
            sent += 512
        return sent
    call = plugin.current_call()
    while time.monotonic() < end:
        call.progress(".")
        sent += 1
    return sent


main = plugin.main
"""

#: A target that does nothing: len([]) is 0, the exit code.
NOOP_TARGET = "builtins:len"


#: Hops to the fork thread timed, and Forkers started and closed.
FORK_HOPS = 2000
FORKER_LIFETIMES = 200


def _fork_hops(forker: sandbox.Forker, count: int) -> list[float]:
    """Microseconds of ``forker.run`` of a no-op, from this thread."""
    took: list[float] = []
    for _ in range(count):
        start = time.perf_counter_ns()
        forker.run(lambda: None)
        took.append((time.perf_counter_ns() - start) / 1000)
    return took


def _forker_lifetimes(count: int) -> list[float]:
    """Microseconds of a Forker's start and close (a thread, a sentinel, a join)."""
    took: list[float] = []
    for _ in range(count):
        start = time.perf_counter_ns()
        sandbox.Forker().start().close()
        took.append((time.perf_counter_ns() - start) / 1000)
    return took


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50": round(statistics.median(ordered), 2),
        "p99": round(p99, 2),
        "mean": round(statistics.fmean(ordered), 2),
    }


def _unsandboxed_start() -> float:
    """Milliseconds from spawn to the child's first byte on a pipe."""
    r, w = os.pipe()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-P", "-s", "-B", "-c"),
            "import os, sys; os.write(int(sys.argv[1]), b'r')",
            str(w),
        ],
        pass_fds=(w,),
        stdin=subprocess.DEVNULL,
    )
    os.close(w)
    os.read(r, 1)
    elapsed = (time.perf_counter() - start) * 1000
    os.close(r)
    proc.wait()
    return elapsed


def _profile(kind: str, work: str, core_socket: str) -> sandbox.Profile:
    if kind == "gateway":
        return sandbox.Profile.gateway(core_socket).with_work_dir(work)
    if kind == "executor":
        return sandbox.Profile.executor(core_socket, work_dir=work)
    if kind == "egress":
        return sandbox.Profile.plugin(work_dir=work, egress=[sandbox.Egress("example.com", 443)])
    return sandbox.Profile.plugin(work_dir=work)


@dataclass
class HostFigures:
    enable_ms: list[float] = field(default_factory=lambda: [])
    call_ms: list[float] = field(default_factory=lambda: [])
    recover_ms: list[float] = field(default_factory=lambda: [])
    #: Per flood kind: core RPC p50 quiet, p50 during the flood, and how the flood ended.
    floods: dict[str, dict[str, object]] = field(default_factory=lambda: {})


def _rpc_p50_ms(client: Client, calls: int) -> float:
    samples: list[float] = []
    for _ in range(calls):
        start = time.perf_counter()
        client.status()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def _flood(client: Client, home: str, kind: str, seconds: float) -> dict[str, object]:
    """Core RPC (Status) p50 from another client, quiet and while the floody
    plugin floods the core with ``kind`` frames."""
    _timed_enable(client, "floody", HostFigures())
    quiet = _rpc_p50_ms(client, 100)
    # Its data directory is its install's (work/plugins/floody@...).
    (work,) = [
        d for d in os.listdir(os.path.join(home, "work", "plugins")) if d.startswith("floody@")
    ]
    flag = os.path.join(home, "work", "plugins", work, "flooding")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(flag)
    outcome: list[str] = []

    def run() -> None:
        try:
            sent = client.invoke("floody", "floody.flood", {"kind": kind, "seconds": seconds})
            outcome.append(f"ran {seconds:g} s, {sent} frames sent")
        except SdkError as exc:
            outcome.append(f"ended: {exc}")

    flooder = threading.Thread(target=run)
    flooder.start()
    while not os.path.exists(flag) and flooder.is_alive():
        client.status()
    samples: list[float] = []
    while flooder.is_alive() and len(samples) < 2000:
        start = time.perf_counter()
        client.status()
        samples.append((time.perf_counter() - start) * 1000)
    flooder.join()
    flooded = statistics.median(samples) if samples else quiet
    return {
        "quiet_p50_ms": round(quiet, 2),
        "flooded_p50_ms": round(flooded, 2),
        # Too few samples when the flood ended the worker at once: no ratio.
        "ratio": round(flooded / quiet, 2) if len(samples) >= 20 else None,
        "samples": len(samples),
        "outcome": outcome[0][:200] if outcome else "",
    }


_CORE_ARGV = (sys.executable, "-m", "naga_core.cli", "daemon", "start", "--foreground")


def _start_core(home: str, log: str) -> subprocess.Popen[bytes]:
    """``naga daemon start --foreground`` (its own process, as in production)."""
    r, w = os.pipe()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*_CORE_ARGV, "--home", home, "--ready-fd", str(w)],
            stdout=out,
            stderr=out,
            pass_fds=(w,),
            env={**os.environ, "PYTHONPATH": REPO},
        )
    os.close(w)
    ready, _, _ = select.select([r], [], [], 60)
    said = os.read(r, 16) if ready else b""
    os.close(r)
    if not said:
        proc.kill()
        raise SystemExit(f"bench: the core did not start; see {log}")
    return proc


def _timed_enable(client: Client, name: str, figures: HostFigures) -> None:
    client.disable_plugin(name)
    start = time.perf_counter()
    info = client.enable_plugin(name, wait=60).plugin
    if not info.pid:
        raise SystemExit(f"bench: {name} did not start: {info.last_failure}")
    figures.enable_ms.append((time.perf_counter() - start) * 1000)


def _plugin_host(calls: int, crashes: int, flood_s: float) -> HostFigures:
    figures = HostFigures()
    with tempfile.TemporaryDirectory(prefix="naga-bench-host-") as root:
        home = os.path.join(root, "home")
        plugin_dir = os.path.join(home, "plugins", "crashy")
        os.makedirs(plugin_dir)
        os.chmod(home, 0o700)
        with open(os.path.join(plugin_dir, "plugin.toml"), "w") as f:
            f.write(CRASHY_MANIFEST)
        with open(os.path.join(plugin_dir, "crashy.py"), "w") as f:
            f.write(CRASHY_CODE)
        floody_dir = os.path.join(home, "plugins", "floody")
        os.makedirs(floody_dir)
        with open(os.path.join(floody_dir, "plugin.toml"), "w") as f:
            f.write(FLOODY_MANIFEST)
        with open(os.path.join(floody_dir, "floody.py"), "w") as f:
            f.write(FLOODY_CODE)
        core = _start_core(home, os.path.join(root, "core.log"))
        try:
            with Client.connect(home) as client:
                for folder in (plugin_dir, floody_dir):  # as an owner installs them
                    client.install_plugin(folder, code_hash(folder))
                _timed_enable(client, "clock", figures)
                for _ in range(calls):
                    start = time.perf_counter()
                    client.invoke("clock", "clock.now")
                    figures.call_ms.append((time.perf_counter() - start) * 1000)
                for _ in range(crashes):
                    _timed_enable(client, "crashy", figures)  # a fresh worker: no backoff history
                    try:
                        client.invoke("crashy", "crashy.crash", timeout=30)
                    except PluginUnavailable:
                        pass
                    else:
                        raise SystemExit("bench: crashy.crash did not crash")
                    crashed = time.perf_counter()
                    client.invoke("crashy", "crashy.echo", {"text": "x"}, timeout=60)
                    figures.recover_ms.append((time.perf_counter() - crashed) * 1000)
                if flood_s > 0:
                    for kind in ("progress", "pong"):
                        figures.floods[kind] = _flood(client, home, kind, flood_s)
                client.shutdown("bench done")
            core.wait(60)
        finally:
            if core.poll() is None:
                core.kill()
                core.wait()
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description="Sandboxed start benchmark (one JSON object)")
    ap.add_argument("--starts", type=int, default=50)
    ap.add_argument(
        "--profile", choices=("plugin", "egress", "executor", "gateway"), default="plugin"
    )
    ap.add_argument("--calls", type=int, default=1000, help="plugin calls to time (0: skip)")
    ap.add_argument("--crashes", type=int, default=8, help="worker crashes to time (0: skip)")
    ap.add_argument(
        "--flood", type=float, default=3.0, help="seconds each frame flood lasts (0: skip)"
    )
    args = ap.parse_args()
    if args.starts < 1:
        ap.error("--starts must be at least 1")
    if args.calls < 0 or args.crashes < 0:
        ap.error("--calls and --crashes must not be negative")

    detect_ms: list[float] = []
    kernel = sandbox.detect()
    for _ in range(10):
        start = time.perf_counter()
        sandbox.detect()
        detect_ms.append((time.perf_counter() - start) * 1000)

    sandboxed: list[float] = []
    layers: dict[str, list[float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="naga-bench-sandbox-") as work,
        sandbox.Forker() as forker,
    ):
        profile = _profile(args.profile, work, os.path.join(work, "core.sock"))
        for _ in range(args.starts):
            child = sandbox.launch(profile, NOOP_TARGET, forker=forker, kernel=kernel)
            sandboxed.append(child.ready_seconds * 1000)
            for layer, ns in child.timings:
                layers.setdefault(layer.value, []).append(ns / 1000)
            end = child.wait(timeout=30)
            if end.code != 0:
                print(f"bench: sandboxed child ended badly: {end}", file=sys.stderr)
                return 1
        unsandboxed = [_unsandboxed_start() for _ in range(args.starts)]
        hops = _fork_hops(forker, FORK_HOPS)
    lifetimes = _forker_lifetimes(FORKER_LIFETIMES)

    result = {
        "profile": args.profile,
        "starts": args.starts,
        "kernel": {
            "release": kernel.release,
            "landlock_abi": kernel.landlock_abi,
            "root": kernel.root,
        },
        "sandboxed_start_ms": _percentiles(sandboxed),
        "unsandboxed_start_ms": _percentiles(unsandboxed),
        "overhead_ms_p50": round(statistics.median(sandboxed) - statistics.median(unsandboxed), 2),
        "fork_hop_us": _percentiles(hops),
        "forker_start_close_us_p50": round(statistics.median(lifetimes), 1),
        "layer_us_p50": {name: round(statistics.median(v), 1) for name, v in layers.items()},
        "detect_ms_p50": round(statistics.median(detect_ms), 2),
    }
    if args.calls or args.crashes:
        host = _plugin_host(args.calls, args.crashes, args.flood)
        result["plugin_host"] = {
            "enable_to_running_ms": _percentiles(host.enable_ms),
            "call_round_trip_ms": _percentiles(host.call_ms) if host.call_ms else None,
            "crash_to_next_call_ms": _percentiles(host.recover_ms) if host.recover_ms else None,
            # Part of crash_to_next_call_ms: the default first restart backoff.
            "first_restart_delay_ms": RestartPolicy().backoff_s * 1000,
            "calls": len(host.call_ms),
            "crashes": len(host.recover_ms),
            # Core RPC p50 while one plugin floods frames, as a ratio to quiet.
            "flood": host.floods,
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
