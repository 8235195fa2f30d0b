"""Write capture for shell commands, staged copy against staging overlay
(ADR 0034): prints one JSON object.

On a workspace of ``--files`` files holding ``--mib`` MiB in all, for each
mechanism (``ShellRunner(overlay=False)``: copy the workspace, run, diff;
``ShellRunner(overlay=True)``: mount an overlay in the command's namespace,
run, read the upper directory):

* ``touch_1_ms``: a command writing one file (median of ``--runs``), from
  staging to the staged writes read back, the sandbox's start included;
* ``touch_1000_ms``: a command creating 1,000 files (one run);
* ``stage_bytes``: what the staging left on disk after the 1-file command.

Also ``sandbox_only_ms``: the 1-file command over an empty workspace with an
overlay (what any command costs), and ``probe_ms``: the overlay probe the
core runs once.

    python bench/shell_staging.py [--files 10000] [--mib 1024] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_ONE = ["/bin/sh", "-c", "echo changed > d0/f0.txt"]
_THOUSAND = [
    "/bin/sh",
    "-c",
    "mkdir -p new && cd new && for i in $(seq 1000); do echo $i > f$i; done",
]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _fill(live: str, files: int, total: int) -> None:
    size = max(1, total // files)
    block = bytes(range(256)) * (size // 256 + 1)
    for i in range(files):
        path = os.path.join(live, f"d{i % 100}", f"f{i}.txt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(f"{i:08d}".encode() + block[: size - 8])


def _disk(path: str) -> int:
    used = 0
    for entry, _dirs, names in os.walk(path):
        for name in names:
            st = os.lstat(os.path.join(entry, name))
            used += st.st_blocks * 512
    return used


def _run(runner: object, live: str, argv: list[str]) -> tuple[float, int]:
    from naga_core.workspace import ShellRunner

    assert isinstance(runner, ShellRunner)
    started = time.perf_counter()
    outcome = runner.run(live, argv, 120.0)
    took = time.perf_counter() - started
    assert outcome.exit_code == 0, outcome.output
    return took, len(outcome.staged)


def measure(files: int, mib: int, runs: int) -> dict[str, object]:
    import sandbox
    from naga_core.workspace import ShellRunner

    report = sandbox.detect()
    out: dict[str, object] = {"workspace_files": files, "workspace_mib": mib}
    with (
        tempfile.TemporaryDirectory(prefix="naga-bench-staging-") as root,
        sandbox.Forker() as forker,
    ):
        scratch = os.path.join(root, "probe")
        os.makedirs(scratch)
        started = time.perf_counter()
        why = sandbox.probe_overlay(scratch, root=os.geteuid() == 0)
        out["probe_ms"] = _ms(time.perf_counter() - started)
        out["overlay_available"] = why is None
        empty = os.path.join(root, "empty")
        os.makedirs(os.path.join(empty, "d0"))
        if why is None:
            runner = ShellRunner(
                os.path.join(root, "stage-empty"), report, forker=forker, overlay=True
            )
            out["sandbox_only_ms"] = _ms(
                statistics.median(_run(runner, empty, _ONE)[0] for _ in range(runs))
            )
        live = os.path.join(root, "live")
        started = time.perf_counter()
        _fill(live, files, mib << 20)
        out["fill_s"] = round(time.perf_counter() - started, 1)
        for name, overlay in (("copy", False), ("overlay", True)):
            if overlay and why is not None:
                out[name] = {"unavailable": why}
                continue
            stage = os.path.join(root, f"stage-{name}")
            runner = ShellRunner(stage, report, forker=forker, overlay=overlay)
            ones = [_run(runner, live, _ONE) for _ in range(runs)]
            stage_bytes = _disk(stage)
            thousand, staged = _run(runner, live, _THOUSAND)
            out[name] = {
                "touch_1_ms": _ms(statistics.median(t for t, _ in ones)),
                "touch_1_staged_paths": ones[0][1],
                "touch_1000_ms": _ms(thousand),
                "touch_1000_staged_paths": staged,
                "stage_bytes": stage_bytes,
            }
            shutil.rmtree(stage, ignore_errors=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    result: dict[str, object] = {
        "bench": "shell_staging",
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
    }
    result.update(measure(args.files, args.mib, args.runs))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
