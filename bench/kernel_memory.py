"""Memory of the kernel's per-effect state: prints one JSON object.

Fills a ledger with ``--effects`` kernel effects in three mixes, then opens
a kernel over it (a full replay) under tracemalloc and reports what the
open keeps, per effect:

* ``quiet``: what a long-lived home mostly journals (bench/_ledgergen.py's
  mix): budget debits (performs without a world part), a sweep every 50,
  a setting every 500; nothing new comes into force.
* ``tools``: every other effect a reversible tool call (a world action with
  its undo), one in 100 of those failing (aborted), a rollback of the last
  10 effects every 1000.
* ``world``: every effect a reversible world action (the worst case).

``by_site`` splits the kept bytes by the allocating line: ``effect_seqs``
(the kernel's effect-seq array), ``in_force`` (what is in force after each
effect: the list, or its change points), ``nodes`` (the in-force stack's
nodes and their depths), ``kernel_other`` (the state, the unapplied and
bracket maps), ``elsewhere`` (mostly the ledger's: the sealed indexes it
keeps, bounded by the segment size, and the seq ints the nodes hold). The
traced heap only: the kept bytes less whatever the replay freed.

With ``--reload-records N``, also the agent's per-session reload lists
(naga_core/agent/_sessions.py) after a rebuild of a home bench/_ledgergen.py
filled with N records: 8 bytes a turn record of each session whose detail
is not kept, compacted to the key and entry windows.

    python bench/kernel_memory.py [--effects 100000] [--mix quiet tools world]
        [--reload-records 100000 --reload-sessions 500]
"""

from __future__ import annotations

import argparse
import gc
import json
import linecache
import os
import sys
import tempfile
import tracemalloc
from collections.abc import Mapping

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bench/ holds modules named like the repository's packages (sandbox.py).
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(__file__)]
sys.path.insert(0, REPO)

from naga.v1 import kernel_pb2 as kpb  # noqa: E402
from naga_core.kernel._kernel import ActionFailed, Actions, Kernel, action  # noqa: E402
from naga_core.kernel._state import Scalar  # noqa: E402
from naga_core.ledger import CheckpointSigner, Ledger  # noqa: E402

MIXES = ("quiet", "tools", "world")
SITES = ("effect_seqs", "in_force", "nodes", "kernel_other", "elsewhere")


def _progress(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def _actions() -> Actions:
    actions = Actions()

    def fail(_args: Mapping[str, Scalar]) -> None:
        raise RuntimeError("the tool failed")

    actions.register("w.set", lambda _args: None)
    actions.register("w.del", lambda _args: None)
    actions.register("w.fail", fail)
    return actions


def _fill(kernel: Kernel, effects: int, mix: str) -> None:
    debit = kpb.SetOp(family="spent", key="t", value=kpb.Value(integer=120))
    made = 0
    i = 0
    while made < effects:
        with kernel.staged():
            if mix == "world" or (mix == "tools" and i % 2):
                fails = mix == "tools" and i % 200 == 1
                do = [action("w.set", key=f"k{i % 100}"), *([action("w.fail")] if fails else [])]
                try:
                    kernel.perform(do, [action("w.del", key=f"k{i % 100}")], description="tool")
                except ActionFailed:
                    made += 1  # its ABORT
                made += 1
            elif mix == "quiet" and i % 500 == 0:
                kernel.register("settings", "agent.max_steps", 8 + i % 3)
                made += 1
            else:
                kernel.perform([], [], description="spent 120", forward=[debit])
                made += 1
            if mix == "tools" and i % 1000 == 999:
                kernel.rollback(kernel.ledger.size - 11)
                made += 1
        if i % 500 == 499:
            kernel.ledger.commit()
        i += 1
    kernel.ledger.commit()


def _site(filename: str, lineno: int) -> str:
    if filename.endswith("kernel/_ascending.py"):  # the effect seqs, delta-encoded (ADR 0057)
        return "effect_seqs"
    if filename.endswith("kernel/_runs.py"):
        return "in_force"
    # The in-force stack moved from _kernel.py to _in_force.py (its own
    # class); the marks name both so that figures from before compare.
    if filename.endswith(("kernel/_kernel.py", "kernel/_in_force.py")):
        src = linecache.getline(filename, lineno)
        marks = (
            ("effect_seqs", "effect_seqs"),
            ("nodes", "_InForce("),  # the stack's nodes as objects (before ADR 0052)
            ("nodes", "node_"),  # as arrays
            ("in_force", "_in_force"),
            ("in_force", "tops"),
        )
        return next((name for name, mark in marks if mark in src), "kernel_other")
    return "kernel_other" if "naga_core/kernel/" in filename else "elsewhere"


def measure(effects: int, mix: str, root: str) -> dict[str, object]:
    signer = CheckpointSigner.generate("naga.ledger/v1/bench")
    with Ledger.open(f"{root}/{mix}", signer) as ledger:
        _progress(f"{mix}: journaling {effects} effects")
        _fill(Kernel.open(ledger, _actions()), effects, mix)
    with Ledger.open(f"{root}/{mix}", signer) as ledger:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        kernel = Kernel.open(ledger, _actions())
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - base
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        n = len(kernel._in_force.effect_seqs)  # pyright: ignore[reportPrivateUsage]
        records = ledger.size
        try:  # the start-up image of this kernel (what a snapshot writes)
            image: object = len(kernel.image().in_force_tops)
        except RecursionError as exc:
            image = f"RecursionError: {exc}"
    sites: dict[str, int] = dict.fromkeys(SITES, 0)
    for stat in snap.statistics("lineno"):
        frame = stat.traceback[0]
        sites[_site(frame.filename, frame.lineno)] += stat.size
    by_site = {k: round(v / n, 2) for k, v in sites.items()}
    return {
        "effects": n,
        "records": records,
        "image_in_force_tops": image,
        "kept_bytes_per_effect": round(kept / n, 2),
        "by_site": by_site,
    }


def measure_reload(records: int, sessions: int, root: str) -> dict[str, object]:
    from bench._ledgergen import fill
    from naga_core._home import Home
    from naga_core._store import open_ledger
    from naga_core.agent._sessions import Sessions

    home = f"{root}/home-{sessions}"
    os.makedirs(home, mode=0o700)
    _progress(f"reload lists: filling a home with {records} records, {sessions} sessions")
    size: int = fill(home, records, sessions=sessions)
    with open_ledger(Home(home), create=False) as ledger:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        index = Sessions()
        index.rebuild(ledger)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
    lists = [s.reload for s in map(index.get, _names(sessions)) if s is not None and s.reload]
    return {
        "records": size,
        "sessions": len(index),
        "loaded": index.loaded(),
        "reload_lists": len(lists),
        "reload_entries": sum(len(r) for r in lists),
        "reload_bytes": sum(sys.getsizeof(r) for r in lists),
        "sessions_index_kept_bytes": kept,
    }


def _names(sessions: int) -> list[str]:
    return [f"s-{i}" for i in range(sessions)]  # bench/_ledgergen.py's names


def main() -> int:
    ap = argparse.ArgumentParser(description="Kernel per-effect memory (one JSON object)")
    ap.add_argument("--effects", type=int, default=100_000)
    ap.add_argument("--mix", nargs="*", choices=MIXES, default=list(MIXES))
    ap.add_argument("--reload-records", type=int, default=0)
    ap.add_argument("--reload-sessions", type=int, default=500)
    args = ap.parse_args()
    result: dict[str, object] = {"benchmark": "kernel_memory"}
    with tempfile.TemporaryDirectory(prefix="naga-kmem-") as root:
        result["mixes"] = {m: measure(args.effects, m, root) for m in args.mix}
        if args.reload_records:
            result["reload"] = measure_reload(args.reload_records, args.reload_sessions, root)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
