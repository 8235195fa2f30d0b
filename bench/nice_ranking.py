"""How a plugin worker ranks against the core for one CPU: prints one JSON object.

The core (this process: one thread spinning, nice 0) and one sandboxed
plugin worker (one thread spinning, the plugin profile's nice 10) share
CPU 0 for ``--seconds``; the figure is the worker's CPU time as a share of
the two's. Under each placement of the worker:

* ``no_cgroup``: the root cpu cgroup, as the launcher leaves it: the
  worker has a session of its own (``start_new_session``), so where the
  kernel's autogroup is on it is in an autogroup of its own, weighed as a
  nice-0 task: its own renice ranks it only inside that autogroup;
* ``no_cgroup_autogroup_nice``: the same, its autogroup given the worker's
  nice level (``/proc/PID/autogroup``);
* ``v1_shares_1024``: its own v1 cpu cgroup as the launcher leaves it, at
  the default weight (ADR 0031);
* ``v1_shares_110``: the same at the weight of nice 10 (``cpu.shares``).

A nice-10 task against a nice-0 one gets 110 / (110 + 1024) = 9.7 %; equal
weights get 50 %. Other processes on the machine share CPU 0 too: the
ratio between the two is what is measured, not their absolute share.

    python bench/nice_ranking.py --seconds 3 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import sandbox  # noqa: E402

_CLK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


def _round(placement: str, seconds: float, kernel: sandbox.KernelReport) -> float:
    support = kernel.cgroups
    group = None
    if placement.startswith("v1_"):
        if support is None or support.version is not sandbox.CgroupVersion.V1:
            raise SystemExit(f"{placement}: no cgroup v1 here")
        group = sandbox.Cgroup.create(support, "nice-bench", sandbox.CgroupLimits())
    stop = threading.Event()
    core_cpu: list[float] = []

    def core() -> None:
        os.sched_setaffinity(0, {0})
        start = time.thread_time()
        n = 0
        while not stop.is_set():
            n += 1
        core_cpu.append(time.thread_time() - start)

    r, w = os.pipe()
    try:
        with tempfile.TemporaryDirectory() as work, sandbox.Forker() as forker:
            profile = sandbox.Profile.plugin(work_dir=work)
            worker = sandbox.launch(
                profile,
                "tests.sandbox._workloads:spin",
                [str(r)],
                forker=forker,
                pass_fds=[r],
                kernel=kernel,
                cgroup=group,
                ready_timeout=60.0,
            )
            os.sched_setaffinity(worker.pid, {0})  # its one (spinning) thread
            os.close(r)
            r = -1
            if placement == "no_cgroup_autogroup_nice":
                with open(f"/proc/{worker.pid}/autogroup", "w", encoding="ascii") as f:
                    f.write(str(profile.nice))
            if placement == "v1_shares_110" and group is not None:
                with open(os.path.join(group.dirs[0], "cpu.shares"), "w", encoding="ascii") as f:
                    f.write("110")
            thread = threading.Thread(target=core)
            before = _cpu_of(worker.pid)
            thread.start()
            time.sleep(seconds)  # the measured window itself
            stop.set()
            thread.join()
            worker_cpu = _cpu_of(worker.pid) - before
            os.close(w)
            w = -1
            worker.wait(10)
    finally:
        for fd in (r, w):
            if fd != -1:
                os.close(fd)
        if group is not None:
            group.remove(timeout=2.0)
    return worker_cpu / (worker_cpu + core_cpu[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kernel = sandbox.detect()
    placements = ["no_cgroup", "no_cgroup_autogroup_nice", "v1_shares_1024", "v1_shares_110"]
    shares: dict[str, list[float]] = {p: [] for p in placements}
    for _ in range(args.rounds):
        for placement in placements:
            shares[placement].append(_round(placement, args.seconds, kernel))
    with open("/proc/sys/kernel/sched_autogroup_enabled", encoding="ascii") as f:
        autogroup = f.read().strip() == "1"
    print(
        json.dumps(
            {
                "bench": "nice_ranking",
                "seconds": args.seconds,
                "rounds": args.rounds,
                "autogroup": autogroup,
                "load_average": os.getloadavg()[0],
                "worker_share_p50": {p: round(statistics.median(v), 3) for p, v in shares.items()},
                "worker_share": {p: [round(x, 3) for x in v] for p, v in shares.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
