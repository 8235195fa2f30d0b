"""Sandboxed worker start benchmark: prints one JSON object.

* sandboxed start, ``sandbox.launch`` to the child's ready report, p50/p99
  over ``--starts`` launches of the chosen profile (default plugin);
* an unsandboxed start of the same interpreter to its first byte on a pipe;
* what each layer costs inside the child (p50, microseconds), as the child
  reports it, and what ``sandbox.detect()`` costs.

    python bench/sandbox.py --starts 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Run as a script, this file's directory comes first on sys.path, and this
# file (bench/sandbox.py) would shadow the sandbox package it measures.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import sandbox  # noqa: E402

#: A target that does nothing: len([]) is 0, the exit code.
NOOP_TARGET = "builtins:len"


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
        return sandbox.Profile.gateway(18789, core_socket).with_work_dir(work)
    if kind == "executor":
        return sandbox.Profile.executor(core_socket, work_dir=work)
    if kind == "egress":
        return sandbox.Profile.plugin(work_dir=work, egress=[sandbox.Egress("example.com", 443)])
    return sandbox.Profile.plugin(work_dir=work)


def main() -> int:
    ap = argparse.ArgumentParser(description="Sandboxed start benchmark (one JSON object)")
    ap.add_argument("--starts", type=int, default=50)
    ap.add_argument(
        "--profile", choices=("plugin", "egress", "executor", "gateway"), default="plugin"
    )
    args = ap.parse_args()
    if args.starts < 1:
        ap.error("--starts must be at least 1")

    detect_ms: list[float] = []
    kernel = sandbox.detect()
    for _ in range(10):
        start = time.perf_counter()
        sandbox.detect()
        detect_ms.append((time.perf_counter() - start) * 1000)

    sandboxed: list[float] = []
    layers: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="naga-bench-sandbox-") as work:
        profile = _profile(args.profile, work, os.path.join(work, "core.sock"))
        for _ in range(args.starts):
            child = sandbox.launch(profile, NOOP_TARGET, kernel=kernel)
            sandboxed.append(child.ready_seconds * 1000)
            for layer, ns in child.timings:
                layers.setdefault(layer.value, []).append(ns / 1000)
            end = child.wait(timeout=30)
            if end.code != 0:
                print(f"bench: sandboxed child ended badly: {end}", file=sys.stderr)
                return 1
        unsandboxed = [_unsandboxed_start() for _ in range(args.starts)]

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
        "layer_us_p50": {name: round(statistics.median(v), 1) for name, v in layers.items()},
        "detect_ms_p50": round(statistics.median(detect_ms), 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
