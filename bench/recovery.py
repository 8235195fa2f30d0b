"""Kill under load, restart, and how fast the core is back: prints one JSON
object.

A real core process (``naga daemon start --foreground``, no gateway), its
executors and its provider plugin, against the fake model on 127.0.0.1
answering slowly (``--model-s`` per answer). ``--sessions`` sessions send a
message each at once; once every one is acknowledged the core is SIGKILLed
and started again, and:

* ``kill_to_serving_s``: the kill to the new core's readiness (its socket
  answers; the process is spawned after the kill, as a supervisor would);
* ``new_message_s``: a message in a fresh session sent at readiness, until
  its answer (the recovery backlog holds all executors but one);
* ``kill_to_last_recovered_s``: the kill to the last of the acknowledged
  messages answered (each sender resends its key at readiness and gets its
  turn's end);
* ``cpu_to_ready_s``: the new core process's own CPU time at readiness
  (wall time on a loaded machine says little; this says what the start
  costs);
* ``ended``: how the acknowledged turns ended (``final``/``error``);
* ``children_at_kill`` / ``still_running_at_serving`` /
  ``children_cpu_after_kill_s``: the killed core's children (executors,
  provider, plugins), how many of them still ran at the new core's
  readiness and the CPU they took after the kill (the bench kills soon
  after a start, while they may still be importing: what they took, the
  new core's start did not get, issue 13;
  docs/adr/0051-restart13-fast-restart.md).

Run once on a fresh home and once on a home pre-filled with ``--records``
turn records (written offline, as a long-lived home holds them).

``tool`` (and ``tool_large``): the same kill in the middle of each turn's
tool step: every session's model asks for ``fs.write`` (the shipped
sandboxed fs plugin), and the core is SIGKILLed once every message is
acknowledged and each executor holds a turn whose write is applied (its
model call after the tool held). The next start resumes each turn from
its recorded steps: the answered write is replayed, not undone nor run
again, and the model is asked for the step after it
(docs/adr/0042-recover13b-resume.md): ``undone`` counts the undo entries in
the history (0: only a write in flight at the kill is undone, ADR 0033),
``workspace_ok`` says every file holds one write's bytes.

``bytecode``: whether the packages were byte-compiled first (the default,
as an installed core is; ``--no-compile`` measures a source checkout under
PYTHONDONTWRITEBYTECODE, bench/_bytecode.py). ``load_average``: at the end.

    python bench/recovery.py [--sessions 20] [--model-s 0.5] [--records 100000] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(__file__)]
sys.path.insert(0, REPO)

import trio  # noqa: E402

from bench._bytecode import compile_sources  # noqa: E402
from naga.sdk import Client  # noqa: E402
from naga.sdk.errors import SdkError  # noqa: E402
from naga.v1 import agent_pb2 as apb  # noqa: E402
from naga_core._home import Home  # noqa: E402
from naga_core._store import open_ledger  # noqa: E402
from naga_core.ledger import Entry  # noqa: E402
from tests.agent.conftest import write_providers  # noqa: E402
from tests.daemon import conftest as core_process  # noqa: E402
from tests.daemon.conftest import start_core_process  # noqa: E402

# A first start of a 100k-record home replays it whole: on a loaded machine
# that passed the tests' readiness timeout, and the bench lost every figure.
core_process.READY_TIMEOUT_S = max(core_process.READY_TIMEOUT_S, 900.0)
from tests.fakes.model_server import FakeModelServer, Reply  # noqa: E402


class SlowModel:
    """The fake model on a trio loop in a thread; every answer is held
    ``delay_s`` after its request arrived."""

    def __init__(self, delay_s: float) -> None:
        self.server = FakeModelServer()
        self._delay = delay_s
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._n = 0
        ready = threading.Event()

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.server.serve)
                self._token = trio.lowlevel.current_trio_token()
                self._scope = nursery.cancel_scope
                self._nursery = nursery
                ready.set()

        self._thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        self._thread.start()
        ready.wait(10)

    def script(self, n: int) -> None:
        names = [f"h{self._n + i}" for i in range(n)]
        self._n += n

        def add() -> None:
            self.server.script(*(Reply.answer("an answer", hold=name) for name in names))
            assert self._nursery is not None
            for name in names:
                self._nursery.start_soon(self._release, name)

        trio.from_thread.run_sync(add, trio_token=self._token)

    async def _release(self, name: str) -> None:
        await self.server.held(name)
        await trio.sleep(self._delay)
        self.server.release(name)

    def release(self, name: str) -> None:
        trio.from_thread.run_sync(self.server.release, name, trio_token=self._token)

    def stop(self) -> None:
        assert self._scope is not None
        trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(5)


def _prefill(home: str, records: int) -> None:
    """``records`` turn records (message and reply pairs in 500 sessions)."""
    with open_ledger(Home(home), create=True) as ledger:
        batch: list[Entry] = []
        for i in range(records // 2):
            session, turn = f"old-{i % 500}", f"t-old{i:08d}"
            message = apb.TurnRecord(
                session=session,
                turn_id=turn,
                peer="",
                idempotency_key=f"k{i}",
                text=f"an old message {i}",
                trust="owner",
                risk_ceiling=4,
            )
            reply = apb.TurnRecord(session=session, turn_id=turn, text=f"an old answer {i}")
            batch += [
                Entry.of("turn.message", message.SerializeToString()),
                Entry.of("turn.reply", reply.SerializeToString()),
            ]
            if len(batch) >= 2000:
                ledger.append_many(batch)
                batch = []
        if batch:
            ledger.append_many(batch)


def _send(home: str, session: str, text: str, key: str, out: dict[str, Any]) -> None:
    out.update(accepted=None, end=None, at=None, failure=None)
    try:
        with Client.connect(home) as c:
            for e in c.run_turn(session, text, key, timeout=600):
                kind = e.WhichOneof("kind")
                if kind == "accepted":
                    out["accepted"] = e.accepted.turn_id
                elif kind in ("final", "error"):
                    out["end"], out["at"] = kind, time.monotonic()
    except SdkError as exc:
        out["failure"] = str(exc)


def _sender(home: str, i: int, key: str, state: dict[str, Any]) -> threading.Thread:
    return threading.Thread(target=_send, args=(home, f"s-{i}", f"message {i}", key, state))


def run_once(sessions: int, model_s: float, records: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="naga-recovery-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    log = Path(root) / "core.log"
    model = SlowModel(model_s)
    try:
        write_providers(home, model.server.openai_url)
        if records:
            _prefill(home, records)
        core = start_core_process(home, log)
        model.script(4 * sessions + 8)
        states: list[dict[str, Any]] = [{} for _ in range(sessions)]
        keys = [uuid.uuid4().hex for _ in range(sessions)]
        threads = [_sender(home, i, keys[i], states[i]) for i in range(sessions)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while not all(s.get("accepted") for s in states):
            if time.monotonic() > deadline:
                raise SystemExit("not every message was accepted")
            time.sleep(0.01)
        children = _children(core.proc.pid)
        killed = time.monotonic()
        core.proc.send_signal(signal.SIGKILL)
        core.proc.wait(10)
        for t in threads:
            t.join(30)
        core = start_core_process(home, log)
        serving = time.monotonic()
        cpu = _cpu_s(core.proc.pid)
        left, orphan_cpu = _cpu_since(children)
        new: dict[str, Any] = {}
        new_thread = threading.Thread(
            target=_send, args=(home, "fresh", "a new message", uuid.uuid4().hex, new)
        )
        new_thread.start()
        threads = [_sender(home, i, keys[i], states[i]) for i in range(sessions)]
        for t in threads:
            t.start()
        new_thread.join(600)
        for t in threads:
            t.join(600)
        ends: dict[str, int] = {}
        for s in states:
            ends[str(s["end"])] = ends.get(str(s["end"]), 0) + 1
        with Client.connect(home) as c:
            size = c.head().size
            c.shutdown("bench done")
        core.proc.wait(60)
        return {
            "records_before": records,
            "records_after": size,
            "sessions": sessions,
            "model_s": model_s,
            "kill_to_serving_s": round(serving - killed, 3),
            "cpu_to_ready_s": cpu,
            "children_at_kill": len(children),
            "still_running_at_serving": left,
            "children_cpu_after_kill_s": orphan_cpu,
            "new_message_s": round(new["at"] - serving, 3) if new.get("at") else None,
            "new_message_end": new.get("end"),
            "kill_to_last_recovered_s": round(
                max(s["at"] for s in states if s.get("at")) - killed, 3
            ),
            "ended": ends,
        }
    finally:
        model.stop()
        shutil.rmtree(root, ignore_errors=True)


def _children(pid: int) -> dict[int, tuple[str, int]]:
    """The processes ``pid`` started (its executors, provider and plugins),
    by pid: each one's start time (a pid reused later is not it) and CPU
    ticks so far."""
    found: dict[int, tuple[str, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[1] == str(pid):
            found[int(entry)] = (stat[19], int(stat[11]) + int(stat[12]))
    return found


def _cpu_since(children: dict[int, tuple[str, int]]) -> tuple[int, float]:
    """How many of ``children`` still run (not ended, not a zombie) and the
    CPU seconds they took since :func:`_children` listed them (a killed
    core's children left running take it from the next start; one already
    reaped is not counted)."""
    running, ticks = 0, 0
    for pid, (started, before) in children.items():
        stat = _stat(pid)
        if stat is None or stat[19] != started:
            continue
        running += stat[0] not in "ZX"
        ticks += int(stat[11]) + int(stat[12]) - before
    return running, ticks / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ToolModel:
    """The fake model answering by the request: a turn's first call asks
    for ``fs.write`` of its session's file; the call after the tool's
    answer is held until :meth:`let_go` while ``holding`` (the first run),
    and answered at once after."""

    def __init__(self, expected: int) -> None:
        self.slow = SlowModel(0.0)
        self.server = self.slow.server
        self.holding = True
        self.held = 0
        self.expected = expected
        self.all_held = threading.Event()
        self._names: list[str] = []
        self.server.responder = self._answer

    def _answer(self, recorded: Any) -> Reply:
        messages = recorded.json()["messages"]
        if messages[-1].get("role") == "tool":
            if not self.holding:
                return Reply.answer("written")
            self.held += 1
            name = f"t{self.held}"
            self._names.append(name)
            if self.held >= self.expected:
                self.all_held.set()
            return Reply.answer("written", hold=name)
        user = next(m for m in reversed(messages) if m.get("role") == "user")
        session = str(user.get("content", "")).rsplit(" ", 1)[-1]
        args = json.dumps({"path": f"files/{session}.txt", "content": f"bytes of {session}\n"})
        return Reply.answer(tool_calls=((f"call-{session}", "fs__write", args),))

    def let_go(self) -> None:
        for name in self._names:
            self.slow.release(name)


def _writers(home: str, keys: list[str], states: list[dict[str, Any]]) -> list[threading.Thread]:
    return [
        threading.Thread(target=_send, args=(home, f"w-{i}", f"write w-{i}", key, states[i]))
        for i, key in enumerate(keys)
    ]


def run_tool_once(sessions: int, records: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="naga-recovery-tool-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    log = Path(root) / "core.log"
    model = ToolModel(sessions)
    try:
        write_providers(home, model.server.openai_url)
        if records:
            _prefill(home, records)
        core = start_core_process(home, log)
        states: list[dict[str, Any]] = [{} for _ in range(sessions)]
        keys = [uuid.uuid4().hex for _ in range(sessions)]
        threads = _writers(home, keys, states)
        for t in threads:
            t.start()
        with Client.connect(home) as c:
            executors = sum(1 for p in c.status().processes if p.role.startswith("executor"))
        # Every executor holds a turn whose write is applied; the rest wait.
        model.expected = min(sessions, max(1, executors))
        if model.held >= model.expected:
            model.all_held.set()
        deadline = time.monotonic() + 300
        while not (model.all_held.is_set() and all(st.get("accepted") for st in states)):
            if time.monotonic() > deadline:
                raise SystemExit(f"only {model.held} writes were applied")
            model.all_held.wait(0.01)
        children = _children(core.proc.pid)
        killed = time.monotonic()
        core.proc.send_signal(signal.SIGKILL)
        core.proc.wait(10)
        for t in threads:
            t.join(30)
        model.holding = False
        core = start_core_process(home, log)
        serving = time.monotonic()
        cpu = _cpu_s(core.proc.pid)
        left, orphan_cpu = _cpu_since(children)
        model.let_go()
        threads = _writers(home, keys, states)
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        ends: dict[str, int] = {}
        for st in states:
            ends[str(st["end"])] = ends.get(str(st["end"]), 0) + 1
        with Client.connect(home) as c:
            notes = [e.description for e in c.history(limit=1000).entries]
            size = c.head().size
            c.shutdown("bench done")
        core.proc.wait(60)
        files = Path(home) / "workspace" / "files"
        ok = all((files / f"w-{i}.txt").read_text() == f"bytes of w-{i}\n" for i in range(sessions))
        return {
            "records_before": records,
            "records_after": size,
            "sessions": sessions,
            "kill_to_serving_s": round(serving - killed, 3),
            "cpu_to_ready_s": cpu,
            "children_at_kill": len(children),
            "still_running_at_serving": left,
            "children_cpu_after_kill_s": orphan_cpu,
            "kill_to_last_recovered_s": round(
                max(st["at"] for st in states if st.get("at")) - killed, 3
            ),
            "ended": ends,
            "undone": sum(1 for n in notes if n.startswith("undo of effect")),
            "in_tool_at_kill": model.expected,
            "workspace_ok": ok,
        }
    finally:
        model.slow.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--model-s", type=float, default=0.5)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--only", choices=("turn", "tool"), default=None, help="one case only")
    ap.add_argument(
        "--no-compile", action="store_true", help="do not byte-compile first (a source checkout)"
    )
    args = ap.parse_args()
    compiled = not args.no_compile and compile_sources()
    cases: dict[str, Callable[[], dict[str, Any]]] = {}
    if args.only != "tool":
        cases["fresh"] = lambda: run_once(args.sessions, args.model_s, 0)
        if args.records:
            cases["large"] = lambda: run_once(args.sessions, args.model_s, args.records)
    if args.only != "turn":
        cases["tool"] = lambda: run_tool_once(args.sessions, 0)
        if args.records:
            cases["tool_large"] = lambda: run_tool_once(args.sessions, args.records)
    out: dict[str, Any] = {}
    for name, case in cases.items():
        try:
            out[name] = case()
        except (AssertionError, OSError, SystemExit) as exc:  # one case's failure, said
            out[name] = {"failed": f"{type(exc).__name__}: {str(exc)[:500]}"}
    out["load_average"] = os.getloadavg()[0]
    out["bytecode"] = compiled
    print(json.dumps(out))


if __name__ == "__main__":
    main()
