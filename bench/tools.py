"""Tools and write capture: prints one JSON object.

* ``fs_read_round_trip``: one fs.read through a real core (PluginService
  Invoke over its socket, to the sandboxed fs worker and back), p50/p99;
* ``capture_1_file``: one fs.write captured and journaled (blobs stored,
  change sets stored, the perform effect durable, its world action run);
* ``shell_1000_files``: one shell command creating 1,000 files in its own
  sandbox over a workspace of ``--files`` files, staged in an overlay where
  the kernel mounts one (``staging``; else a staged copy): the staging, the
  sandbox and command, the difference, the capture and effect; and
  ``staged_copy_ms``, what a staged copy of that workspace alone costs
  (ADR 0034; ``bench/shell_staging.py`` compares the two at 10,000 files);
* ``rollback_100_writes``: one rollback undoing 100 journaled file writes
  (every prior byte restored from the blob store).

    python bench/tools.py [--calls 200] [--files 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _quantiles(times: list[float]) -> dict[str, float]:
    q = statistics.quantiles(times, n=100)
    return {"p50_us": round(q[49] * 1e6), "p99_us": round(q[98] * 1e6), "calls": len(times)}


def fs_read_round_trip(calls: int) -> dict[str, float]:
    from naga_core.plugins import PluginsConfig
    from tests.daemon.conftest import core_in_thread

    with tempfile.TemporaryDirectory(prefix="naga-bench-tools-") as root:
        home = os.path.join(root, "home")
        os.makedirs(os.path.join(home, "workspace"), mode=0o700)
        os.chmod(home, 0o700)
        with open(os.path.join(home, "workspace", "notes.txt"), "w") as f:
            f.write("a line of text\n" * 40)
        with core_in_thread(home, plugins=PluginsConfig()) as core:
            with core.client() as c:
                c.enable_plugin("fs", wait=30)
                args = json.dumps({"path": "notes.txt"})
                times: list[float] = []
                for _ in range(calls + 5):
                    started = time.perf_counter()
                    c.invoke_raw("fs", "fs.read", args)
                    times.append(time.perf_counter() - started)
                c.shutdown("bench done")
            core.join()
    return _quantiles(times[5:])


_THOUSAND = "mkdir -p new && cd new && for i in $(seq 1000); do echo $i > f$i; done"


def _kernel(home_dir: str):
    from naga_core._home import Home, load_signer
    from naga_core._store import blob_store
    from naga_core.kernel import Actions, Kernel
    from naga_core.ledger import Ledger
    from naga_core.workspace import Workspace

    os.makedirs(home_dir, mode=0o700)
    home = Home.resolve(home_dir)
    home.ensure()
    signer = load_signer(home, create=True)
    actions = Actions()
    blobs = blob_store(home)
    workspace = Workspace(home, blobs, lambda: "")
    workspace.install(actions)
    ledger = Ledger.open(home.ledger_dir, signer, blobs=blobs)
    return ledger, Kernel.open(ledger, actions), workspace


def capture_and_rollback(files: int) -> dict[str, object]:
    import sandbox
    from naga_core.workspace import Node, ShellRunner

    out: dict[str, object] = {}
    with (
        tempfile.TemporaryDirectory(prefix="naga-bench-capture-") as root,
        sandbox.Forker() as forker,
    ):
        ledger, kernel, workspace = _kernel(os.path.join(root, "home"))
        live = workspace.root
        # One file, captured and journaled, 50 times (distinct contents).
        times: list[float] = []
        for i in range(50):
            data = f"version {i}\n".encode() * 20
            started = time.perf_counter()
            captured = workspace.capture({"one.txt": (Node.file(data), data)})
            assert captured is not None
            workspace.journal(kernel, captured, description="bench: one file")
            ledger.commit()
            times.append(time.perf_counter() - started)
        out["capture_1_file"] = _quantiles(times)

        # A workspace of `files` files, then a command that creates 1,000 more.
        for i in range(files):
            path = os.path.join(live, f"d{i % 20}", f"f{i}.txt")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(f"file {i}\n")
        runner = ShellRunner(os.path.join(root, "stage"), sandbox.detect(), forker=forker)
        started = time.perf_counter()
        outcome = runner.run(
            live,
            [
                "/bin/sh",
                "-c",
                "mkdir -p new && cd new && for i in $(seq 1000); do echo $i > f$i; done",
            ],
            60.0,
        )
        ran = time.perf_counter() - started
        captured = workspace.capture(outcome.staged)
        assert captured is not None
        workspace.journal(kernel, captured, description="bench: shell")
        ledger.commit()
        total = time.perf_counter() - started
        started = time.perf_counter()
        from naga_core.workspace import Stage

        Stage(live, os.path.join(root, "stage-copy")).prepare()
        copy = time.perf_counter() - started
        out["shell_1000_files"] = {
            "workspace_files": files,
            "changed_paths": len(captured.changed),
            "staging": "copy" if runner.copy_because else "overlay",
            "staged_copy_ms": _ms(copy),
            "run_and_diff_ms": _ms(ran),
            "total_with_capture_ms": _ms(total),
            "exit": outcome.ended,
        }

        # 100 file writes, then one rollback of all of them.
        mark = kernel.perform([], [], description="bench: mark")
        for i in range(100):
            data = f"write {i}\n".encode()
            captured = workspace.capture({f"r/w{i}.txt": (Node.file(data), data)})
            assert captured is not None
            workspace.journal(kernel, captured, description="bench: write")
        ledger.commit()
        started = time.perf_counter()
        kernel.rollback(mark)
        ledger.commit()
        out["rollback_100_writes_ms"] = _ms(time.perf_counter() - started)
        assert not os.path.exists(os.path.join(live, "r", "w0.txt"))
        ledger.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--files", type=int, default=1000)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))  # the in-thread core helper lives with the tests
    result: dict[str, object] = {"bench": "tools", "python": platform.python_version()}
    result["fs_read_round_trip"] = fs_read_round_trip(args.calls)
    result.update(capture_and_rollback(args.files))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
