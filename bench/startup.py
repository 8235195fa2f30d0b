"""Start to first answered turn on homes of growing ledgers: prints one JSON
object.

For each size a home is filled with that many records through the real
write path (bench/_ledgergen.py: tokens minted, turn records, kernel
effects), started once (a full replay; its clean stop writes the start-up
snapshot), then measured over ``--runs`` restarts of a real core process
(``naga daemon start --foreground``, no gateway) against the fake model on
127.0.0.1:

* ``ready_s``: spawn to the core's readiness (its socket answers);
* ``first_turn_s``: spawn to the first turn's ``final`` (a session of the
  old ledger, so its detail is read back from the ledger);
* ``cpu_to_ready_s``: the core process's CPU time at readiness (less
  sensitive than wall time to a loaded machine);
* ``rss_mb``: the core's resident memory after the first turn;
* ``full_replay_ready_s``: readiness once the snapshots are removed (what
  every start cost before them).

The goal: the biggest size's ``first_turn_s`` within 2x of the smallest's,
RSS flat. Medians over the runs.

``bytecode``: whether the packages were byte-compiled first (the default,
as an installed core is; ``--no-compile`` measures a source checkout under
PYTHONDONTWRITEBYTECODE, bench/_bytecode.py).

    python bench/startup.py [--sizes 10000,100000,1000000] [--runs 3] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bench/ holds modules named like the repository's packages (sandbox.py).
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(__file__)]
sys.path.insert(0, REPO)

import trio  # noqa: E402

from bench._bytecode import compile_sources  # noqa: E402
from bench._ledgergen import fill  # noqa: E402
from naga.sdk import Client  # noqa: E402
from tests.agent.conftest import write_providers  # noqa: E402
from tests.daemon.conftest import CoreProcess  # noqa: E402
from tests.fakes.model_server import FakeModelServer, Reply  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


class Model:
    """The fake model on a trio loop in a thread, answering at once."""

    def __init__(self) -> None:
        self.server = FakeModelServer()
        self.server.responder = lambda _req: Reply.answer("the answer")
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        ready = threading.Event()

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.server.serve)
                self._token = trio.lowlevel.current_trio_token()
                self._scope = nursery.cancel_scope
                ready.set()

        self._thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise SystemExit("the fake model did not start")

    def stop(self) -> None:
        assert self._scope is not None
        trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(5)


def _proc_stat(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MB) of ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICK
    rss_kb = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    return cpu, rss_kb / 1024


#: A full replay of a big ledger on a loaded machine takes minutes.
READY_TIMEOUT_S = 1800.0


def start_core_process(home: str, log: Path) -> CoreProcess:
    """``naga daemon start --foreground`` (no gateway), once it serves."""
    read_end, write_end = os.pipe()
    env = {**os.environ, "PYTHONPATH": REPO}
    argv = [sys.executable, "-m", "naga_core.cli", "daemon", "start", "--foreground"]
    argv += ["--home", home, "--ready-fd", str(write_end), "--no-gateway"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
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
        raise SystemExit(f"the core did not start:\n{core.output()[-4000:]}")
    return core


def _stop(core: CoreProcess, home: str) -> None:
    with Client.connect(home) as c:
        c.shutdown("bench done")
    core.proc.wait(300)


def _start_once(home: str, log: Path, *, turn: bool) -> dict[str, float]:
    t0 = time.monotonic()
    core = start_core_process(home, log)
    ready = time.monotonic() - t0
    cpu, _ = _proc_stat(core.proc.pid)
    out = {"ready_s": ready, "cpu_to_ready_s": cpu}
    try:
        if turn:
            with Client.connect(home) as c:
                ended = ""
                for e in c.run_turn("s-7", "hello again", uuid.uuid4().hex, timeout=300):
                    kind = e.WhichOneof("kind")
                    if kind in ("final", "error"):
                        ended = kind
                if ended != "final":
                    raise SystemExit(f"the first turn ended with {ended or 'nothing'}")
            out["first_turn_s"] = time.monotonic() - t0
            out["rss_mb"] = _proc_stat(core.proc.pid)[1]
    finally:
        _stop(core, home)
    return out


def _snapshots(home: str) -> str:
    return os.path.join(home, "ledger", "snapshots")


def run_size(records: int, runs: int, model: Model) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="naga-startup-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    log = Path(root) / "core.log"
    try:
        write_providers(home, model.server.openai_url)
        t0 = time.monotonic()
        size = fill(home, records)
        generated = time.monotonic() - t0
        first = _start_once(home, log, turn=False)  # full replay; the stop snapshots
        samples = [_start_once(home, log, turn=True) for _ in range(runs)]
        shutil.rmtree(_snapshots(home))
        full = _start_once(home, log, turn=False)
        used = "snapshot at seq" in log.read_text()
        return {
            "records": size,
            "generate_s": round(generated, 2),
            "first_start_ready_s": round(first["ready_s"], 3),
            **{
                k: round(statistics.median(s[k] for s in samples), 3)
                for k in ("ready_s", "first_turn_s", "cpu_to_ready_s", "rss_mb")
            },
            "full_replay_ready_s": round(full["ready_s"], 3),
            "full_replay_cpu_s": round(full["cpu_to_ready_s"], 3),
            "started_from_snapshot": used,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--no-compile", action="store_true", help="do not byte-compile first (a source checkout)"
    )
    args = ap.parse_args()
    compiled = not args.no_compile and compile_sources()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    model = Model()
    try:
        results = {str(n): run_size(n, args.runs, model) for n in sizes}
    finally:
        model.stop()
    small, big = results[str(min(sizes))], results[str(max(sizes))]
    print(
        json.dumps(
            {
                "sizes": results,
                "first_turn_ratio_big_to_small": round(
                    big["first_turn_s"] / small["first_turn_s"], 2
                ),
                "cpu_ratio_big_to_small": round(
                    big["cpu_to_ready_s"] / max(small["cpu_to_ready_s"], 0.01), 2
                ),
                "rss_ratio_big_to_small": round(big["rss_mb"] / small["rss_mb"], 2),
                "load_average": os.getloadavg()[0],
                "bytecode": compiled,
            }
        )
    )


if __name__ == "__main__":
    main()
