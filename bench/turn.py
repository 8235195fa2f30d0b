"""Turns through a real core process, its executor pool and its provider
plugin, against the fake model on 127.0.0.1 answering at once: prints one
JSON object.

* cold start: ``naga daemon start --foreground`` spawned to the first
  answered turn (the executors and the provider warm up meanwhile);
* runtime overhead per turn: wall p50/p99 over ``--turns`` sequential
  turns (``turn_wall``, from the SDK client's call to the turn's last event),
  the same less the time the fake model spent answering each turn's request
  (``turn_overhead``: from its last byte read to its answer's last byte
  written; what the runtime adds around the model call: client, core,
  executor, provider, HTTP client), and the CPU time summed over every Naga
  process (the core and its workers, from /proc/PID/stat) per turn, also
  per role (``turn_cpu_ms_by_role``);
* throughput: ``--sessions`` sessions x ``--per-session`` turns at once;
* resident memory of all Naga processes, idle and after ``--grow`` turns,
  also per role (``rss_by_role_mb``: core, executor, plugin:<name>; a role
  with several processes is summed) after warm-up and at each of
  ``--grow-marks`` (turn counts within the grow phase), so growth per
  process is told apart from a one-off high-water mark;
* bytes the provider received for the message "hi" (request line, headers,
  body) in a fresh session;
* ``per_turn_wire``: process crossings and encodings per turn, counted (not
  estimated) over ``--count`` turns of a core run in this process with
  counting wrappers on its wire functions: plugin frames each way (pings
  and pongs aside), gRPC messages each way, HTTP requests and responses at
  the fake model; and the core's encodings: protobuf serializations and
  parses of those messages, JSON and base64 calls in the turn path's
  modules. Every crossing of a turn has the core at one end, except the
  provider's HTTP, counted at the model.
* ``seal_ms_per_turn``: what sealing a subject's words costs a turn
  (docs/adr/0058): the seals and opens counted, their CPU where the core
  runs them, the same calls replayed in isolation, and an A/B of sealed
  against unsealed turns of one core (:func:`_seal_cost`).

    python bench/turn.py [--turns 200] [--sessions 20] [--per-session 5] [--grow 400]
                         [--grow-sessions 20] [--grow-marks 400,1600]
                         [--seal-turns 50] [--seal-ab 400] [--seal-reps 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(__file__)]
sys.path.insert(0, REPO)

import trio  # noqa: E402

from naga.sdk import Client  # noqa: E402
from naga_core._home import Home  # noqa: E402
from naga_core.agent import AgentConfig  # noqa: E402
from naga_core.memory import KeyRing, Sealer  # noqa: E402
from tests.agent.conftest import write_providers  # noqa: E402
from tests.daemon.conftest import core_in_thread  # noqa: E402
from tests.fakes.model_server import FakeModelServer, Reply  # noqa: E402
from tests.seal_meter import Call, meter_seal, plain_arm, replay_us  # noqa: E402

_CORE_ARGV = (sys.executable, "-m", "naga_core.cli", "daemon", "start", "--foreground")
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class Server:
    """The fake model on a trio loop in a thread; answers whatever is asked."""

    def __init__(self) -> None:
        self.server = FakeModelServer()
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
        ready.wait(10)

    def script(self, n: int, *, distinct: bool = False) -> None:
        """``n`` answers "ok"; ``distinct``: each its own ("ok 1", ...), so
        no two answer blobs are the same bytes (the store keeps one copy of
        equal blobs: unsealed, the same answer is written once)."""
        texts = [f"ok {i}" if distinct else "ok" for i in range(n)]
        replies = [Reply.answer(text, usage=(10, 1), pieces=1) for text in texts]
        trio.from_thread.run_sync(self.server.script, *replies, trio_token=self._token)

    def answer_s(self) -> list[float]:
        """Seconds the fake spent on each request it answered so far."""
        return trio.from_thread.run_sync(lambda: list(self.server.answer_s), trio_token=self._token)

    def requests(self) -> list[Any]:
        return trio.from_thread.run_sync(lambda: list(self.server.requests), trio_token=self._token)

    def stop(self) -> None:
        assert self._scope is not None
        trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(5)


def _free_port() -> int:
    """A loopback port free now, for the core's gateway. On its default
    port the gateway gave up whenever another core on the machine held it,
    and the figures (CPU, RSS, processes) then left it out."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _pct(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "p50_ms": round(statistics.median(s) * 1000, 2),
        "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1000, 2),
    }


def _pids(client: Client, core_pid: int) -> list[int]:
    return sorted({core_pid, *(p.pid for p in client.status().processes if p.pid)})


def _cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total / _TICK


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * _PAGE
        except OSError:
            pass
    return round(total / 2**20, 1)


def _roles(client: Client, core_pid: int) -> dict[int, str]:
    roles = {core_pid: "core"}
    for p in client.status().processes:
        if p.pid and p.pid != core_pid:
            roles[p.pid] = p.role
    return roles


def _rss_by_role_mb(roles: dict[int, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid, role in roles.items():
        out[role] = round(out.get(role, 0.0) + _rss_mb([pid]), 1)
    return dict(sorted(out.items()))


def _turn(client: Client, session: str, text: str = "hello") -> float:
    start = time.perf_counter()
    events = list(client.run_turn(session, text, uuid.uuid4().hex, timeout=60))
    took = time.perf_counter() - start
    if events[-1].WhichOneof("kind") != "final":
        raise SystemExit(f"bench: a turn failed: {events[-1]}")
    return took


class _Patches:
    """Counting wrappers on module attributes, undone on exit."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._undo: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        self._undo.append((owner, name, original))
        setattr(owner, name, make(original))

    def undo(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)


class _Counting:
    """A stand-in for ``json`` or ``base64`` in one module: counts its calls."""

    def __init__(self, module: Any, counts: Counter[str], label: str) -> None:
        self._module = module
        self._counts = counts
        self._label = label

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if not callable(attr) or name[:1].isupper():
            return attr
        counts, label = self._counts, f"encode:{self._label}.{name}"

        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[label] += 1
            return attr(*args, **kwargs)

        return counted


@contextlib.contextmanager
def count_wire() -> Generator[Counter[str]]:
    """Count, in this process's core, every crossing and encoding of the
    turn path (see the module docstring)."""
    from naga.v1 import plugin_pb2
    from naga_core.daemon import _bridge
    from naga_core.plugins import _session

    p = _Patches()
    counts = p.counts

    def frame_out(encode: Any) -> Any:
        def counted(frame: plugin_pb2.CoreToPlugin, **kw: Any) -> bytes:
            if frame.WhichOneof("frame") != "ping":
                counts["plugin_frames_out"] += 1
                counts["encode:proto.serialize(frame)"] += 1
            return encode(frame, **kw)

        return counted

    def frame_in(decode: Any) -> Any:
        def counted(body: bytes) -> plugin_pb2.PluginToCore:
            frame = decode(body)
            if frame.WhichOneof("frame") != "pong":
                counts["plugin_frames_in"] += 1
                counts["encode:proto.parse(frame)"] += 1
            return frame

        return counted

    def grpc_in(decode: Any) -> Any:
        def counted(cls: Any, raw: bytes) -> Any:
            counts["grpc_messages_in"] += 1
            counts["encode:proto.parse(grpc)"] += 1
            return decode(cls, raw)

        return counted

    def grpc_out(make: Any) -> Any:
        def wrapped(self: Any, m: Any, full: str) -> Any:
            behave = make(self, m, full)

            def counted(raw: bytes, context: Any) -> Any:
                answer = behave(raw, context)
                if isinstance(answer, bytes):
                    counts["grpc_messages_out"] += 1
                    counts["encode:proto.serialize(grpc)"] += 1
                    return answer
                return _counted_stream(answer)

            return counted

        return wrapped

    def _counted_stream(messages: Iterator[bytes]) -> Iterator[bytes]:
        for message in messages:
            counts["grpc_messages_out"] += 1
            counts["encode:proto.serialize(grpc)"] += 1
            yield message

    p.wrap(_session, "encode_frame", frame_out)
    p.wrap(_session, "decode_from_plugin", frame_in)
    p.wrap(_bridge, "_decode", grpc_in)
    for method in ("_unary", "_async_unary", "_stream"):
        p.wrap(_bridge.Bridge, method, grpc_out)
    for name, module in list(sys.modules.items()):
        if name.startswith(("naga_core.agent.", "naga_core.plugins.", "naga_core.daemon.")):
            for lib in ("json", "base64"):
                if getattr(module, lib, None) is sys.modules[lib]:
                    p.wrap(module, lib, lambda m, lib=lib: _Counting(m, counts, lib))
    try:
        yield counts
    finally:
        p.undo()


def _per_turn_wire(server: Server, home: str, turns: int) -> dict[str, Any]:
    os.makedirs(home, mode=0o700)
    write_providers(home, server.server.openai_url)
    with (
        count_wire() as counts,
        core_in_thread(home, agent=AgentConfig(executors=2)) as core,
        core.client() as c,
    ):
        server.script(1)
        _turn(c, "count-warm")  # workers warm, sessions known
        counts.clear()
        before = len(server.requests())
        server.script(turns)
        for i in range(turns):
            _turn(c, f"count-{i % 3}")
        http = len(server.requests()) - before
        totals = dict(counts)
        c.shutdown("count done")
    totals["http_requests_in"] = http
    totals["http_responses_out"] = http
    per = {k: round(v / turns, 2) for k, v in sorted(totals.items())}
    crossings = sum(v for k, v in per.items() if k.endswith(("_in", "_out")))
    encodings = sum(v for k, v in per.items() if k.startswith("encode:"))
    return {
        "turns": turns,
        "crossings": round(crossings, 2),
        "encodings": round(encodings, 2),
        **per,
    }


def _thread_cpu_s(tid: int) -> float:
    """A thread of this process's time on a CPU (ns, from schedstat)."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def _ms(samples_s: list[float]) -> dict[str, float]:
    s = sorted(samples_s)
    return {
        "p50": round(statistics.median(s) * 1000, 3),
        "p99": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1000, 3),
    }


def _seal_cost(
    server: Server, root: str, turns: int, ab_turns: int, reps: int, *, distinct: bool = True
) -> dict[str, Any]:
    """What sealing costs a turn (docs/adr/0058), in cores run in this
    process (each in its own home under ``root``) with tests/seal_meter.py's
    wrappers on their seals:

    * ``ops`` (per turn): every seal and open a turn does, counted (down to
      the AEAD calls, data keys made, subject keys unwrapped), with bytes;
    * ``p50``/``p99`` (ms): their CPU per turn where the core calls them
      (the core thread's, inside the entry points; a second core, with
      no nested wrapper), ``wall``: the same calls' wall time;
    * ``isolated_ms``: the first core's calls with their arguments,
      recorded turn by turn and run again ``reps`` times on a Sealer over
      its stopped home's key ring (no core, no wrapper), CPU and wall;
    * ``ab``: a third core's turns alternating sealed and unsealed
      (tests/seal_meter.plain_arm), wall and the CPU of the core's loop
      thread (where every seal of a turn runs) per turn by arm; the
      ``aa_`` figures split the sealed turns against themselves: what the
      machine alone makes of the same comparison."""

    def core(name: str) -> Any:
        home = os.path.join(root, name)
        os.makedirs(home, mode=0o700)
        write_providers(home, server.server.openai_url)
        return core_in_thread(home, agent=AgentConfig(executors=2))

    calls: list[list[Call]] = []
    with meter_seal() as meter, core("seal-count") as c1, c1.client() as c:
        server.script(1)
        _turn(c, "seal-warm")  # workers warm, the subject's key made
        meter.clear()
        meter.recording = True
        server.script(turns)
        for i in range(turns):
            n0 = len(meter.calls)
            _turn(c, f"seal-{i % 3}")
            calls.append(meter.calls[n0:])
        counts = dict(meter.counts)
        c.shutdown("seal count done")
    iso_wall, iso_cpu = replay_us(
        Sealer(KeyRing.of_home(Home(os.path.join(root, "seal-count")))), calls, reps
    )
    per_turn_s: list[float] = []
    per_turn_cpu: list[float] = []
    with meter_seal(nested=False) as meter, core("seal-time") as c2, c2.client() as c:
        server.script(1)
        _turn(c, "seal-warm")
        server.script(turns)
        for i in range(turns):
            s0, c0 = meter.seconds, meter.cpu_seconds
            _turn(c, f"seal-{i % 3}")
            per_turn_s.append(meter.seconds - s0)
            per_turn_cpu.append(meter.cpu_seconds - c0)
        c.shutdown("seal time done")
    walls: dict[bool, list[float]] = {False: [], True: []}
    cpus: dict[bool, list[float]] = {False: [], True: []}
    with plain_arm() as arm, core("seal-ab") as c3, c3.client() as c:
        server.script(1)
        _turn(c, "seal-warm")
        loop = c3.thread.native_id
        assert loop is not None
        server.script(ab_turns, distinct=distinct)
        for i in range(ab_turns):
            plain = arm.plain = i % 2 == 1
            cpu0 = _thread_cpu_s(loop)
            walls[plain].append(_turn(c, f"ab-{i % 3}"))
            cpus[plain].append(_thread_cpu_s(loop) - cpu0)
        arm.plain = False
        c.shutdown("seal a/b done")
    med = statistics.median
    sealed, plain_w = walls[False], walls[True]
    sealed_cpu, plain_cpu = cpus[False], cpus[True]
    return {
        "turns": turns,
        **_ms(per_turn_cpu),
        "wall": _ms(per_turn_s),
        "isolated_ms": {
            **_ms([us / 1e6 for us in iso_cpu]),
            "wall": _ms([us / 1e6 for us in iso_wall]),
            "reps": reps,
        },
        "ops": {k: round(v / turns, 2) for k, v in sorted(counts.items())},
        "ab": {
            "turns": ab_turns,
            "sealed_wall_p50_ms": round(med(sealed) * 1000, 2),
            "plain_wall_p50_ms": round(med(plain_w) * 1000, 2),
            "wall_diff_p50_ms": round((med(sealed) - med(plain_w)) * 1000, 2),
            "aa_wall_diff_p50_ms": round((med(sealed[0::2]) - med(sealed[1::2])) * 1000, 2),
            "sealed_loop_cpu_p50_ms": round(med(sealed_cpu) * 1000, 3),
            "plain_loop_cpu_p50_ms": round(med(plain_cpu) * 1000, 3),
            "loop_cpu_diff_p50_ms": round((med(sealed_cpu) - med(plain_cpu)) * 1000, 3),
            "aa_loop_cpu_diff_p50_ms": round(
                (med(sealed_cpu[0::2]) - med(sealed_cpu[1::2])) * 1000, 3
            ),
        },
        "target_ms": 1.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--per-session", type=int, default=5)
    parser.add_argument("--grow", type=int, default=400)
    parser.add_argument(
        "--grow-sessions", type=int, default=20, help="sessions the grow turns cycle through"
    )
    parser.add_argument("--count", type=int, default=50, help="turns of the wire count")
    parser.add_argument("--seal-turns", type=int, default=50, help="turns of the seal count")
    parser.add_argument("--seal-ab", type=int, default=400, help="turns of the sealed/unsealed A/B")
    parser.add_argument(
        "--seal-reps", type=int, default=200, help="replays of the seal count's calls"
    )
    parser.add_argument(
        "--grow-marks",
        default="",
        help="comma-separated turn counts of the grow phase at which to record RSS by role",
    )
    args = parser.parse_args()
    marks = sorted({int(m) for m in args.grow_marks.split(",") if m} | {args.grow})
    server = Server()
    root = tempfile.mkdtemp(prefix="naga-bench-turn-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    write_providers(home, server.server.openai_url)
    proc: subprocess.Popen[bytes] | None = None
    out: dict[str, Any] = {"bench": "turn"}
    try:
        out["per_turn_wire"] = _per_turn_wire(server, os.path.join(root, "count"), args.count)
        out["seal_ms_per_turn"] = _seal_cost(
            server, root, args.seal_turns, args.seal_ab, args.seal_reps
        )
        server.script(1)
        gateway_port = str(_free_port())
        r, w = os.pipe()
        started = time.perf_counter()
        with open(os.path.join(root, "core.log"), "ab") as log:
            proc = subprocess.Popen(
                [*_CORE_ARGV, "--home", home, "--ready-fd", str(w), "--gateway-port", gateway_port],
                stdout=log,
                stderr=log,
                pass_fds=(w,),
                env={**os.environ, "PYTHONPATH": REPO},
            )
        os.close(w)
        select.select([r], [], [], 60)
        os.close(r)
        with Client.connect(home) as client:
            _turn(client, "cold")
            out["cold_start_to_first_turn_ms"] = round((time.perf_counter() - started) * 1000, 1)
            pids = _pids(client, proc.pid)
            time.sleep(1.0)  # let the start-up settle before the idle figure
            out["rss_idle_mb"] = _rss_mb(pids)
            out["processes"] = len(pids)
            # What rss_idle_mb covers: the processes up at the first answer
            # (the plugins' workers start meanwhile and may not be yet).
            idle_roles = _roles(client, proc.pid)
            out["rss_idle_roles"] = sorted(idle_roles[p] for p in pids if p in idle_roles)

            server.script(args.turns)
            roles = _roles(client, proc.pid)
            cpu0 = _cpu_s(pids)
            cpu0_by = {pid: _cpu_s([pid]) for pid in roles}
            walls: list[float] = []
            at_model: list[float] = []
            for i in range(args.turns):
                seen = len(server.answer_s())
                walls.append(_turn(client, f"seq-{i % 10}"))
                at_model.append(sum(server.answer_s()[seen:]))
            cpu = _cpu_s(pids) - cpu0
            cpu_by_role: dict[str, float] = {}
            for pid, before in cpu0_by.items():
                role = roles[pid]
                cpu_by_role[role] = cpu_by_role.get(role, 0.0) + _cpu_s([pid]) - before
            out["turn_wall"] = _pct(walls)
            # What the runtime adds around the model call: the wall time
            # less the time the fake spent answering (request read to
            # answer written), turn by turn.
            out["turn_overhead"] = _pct([w - m for w, m in zip(walls, at_model, strict=True)])
            out["model_answer"] = _pct(at_model)
            out["turn_cpu_ms_per_turn"] = round(cpu / args.turns * 1000, 2)
            # Where that CPU goes (the same turns, per process role).
            out["turn_cpu_ms_by_role"] = {
                r: round(v / args.turns * 1000, 2) for r, v in sorted(cpu_by_role.items()) if v
            }

            total = args.sessions * args.per_session
            server.script(total)

            def session(n: int) -> None:
                with Client.connect(home) as c:
                    for _ in range(args.per_session):
                        _turn(c, f"conc-{n}")

            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.sessions) as pool:
                list(pool.map(session, range(args.sessions)))
            out["turns_per_s"] = round(total / (time.perf_counter() - t0), 1)

            roles = _roles(client, proc.pid)
            by_role: dict[str, dict[str, float]] = {"warm": _rss_by_role_mb(roles)}
            server.script(args.grow)
            for i in range(args.grow):
                _turn(client, f"grow-{i % args.grow_sessions}")
                if i + 1 in marks:
                    by_role[str(i + 1)] = _rss_by_role_mb(roles)
            out["rss_after_grow_mb"] = _rss_mb(pids)
            out["rss_by_role_mb"] = by_role
            out["grow_turns"] = args.grow

            server.script(1)
            before = len(server.requests())
            _turn(client, "fresh-hi", "hi")
            hi = server.requests()[before:]
            out["bytes_to_model_for_hi"] = sum(req.wire_bytes for req in hi)
            client.shutdown("bench done")
        proc.wait(30)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()
        if os.environ.get("BENCH_KEEP") is None:
            shutil.rmtree(root, ignore_errors=True)
    out["targets"] = {
        "turn_wall_p50_ms": 20,
        "turn_overhead_p50_ms": 14,
        "turns_per_s": 40,
        "cold_start_to_first_turn_ms": 1500,
        "rss_idle_mb": 250,
        "bytes_to_model_for_hi": 6144,
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
