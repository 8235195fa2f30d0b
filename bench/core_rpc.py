"""naga-core RPC benchmark over its Unix socket: prints one JSON object.

* unary round trips/s and p50/p99 latency (GetHead, one client);
* effect-appending RPCs/s (SetSetting, each durable before it is answered)
  with 1 and N concurrent clients;
* the grpc/trio bridge's own cost (docs/adr/0004-grpc-trio-bridge.md): the
  same empty call answered by a plain grpcio handler and by a handler run on
  the trio loop through the bridge, in one server process, 1 and N clients;
* capability tokens: GetHead presenting a token instead of the owner
  credential (over the socket), and token checks per second through the
  core's authorizer itself (credential parsing, HMAC chain, caveats against
  the method's rule, then revocation, budget and trust read from a real
  kernel), without gRPC.

The core and the bridge server run as child processes, as in production
(clients and core never share a GIL); clients are threads of this process.

    python bench/core_rpc.py [--calls 3000] [--clients 8]
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import platform
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
from google.protobuf.message import Message

from naga.tokens import Risk, TrustLevel
from naga_core.daemon import CoreAuthorizer

REPO = Path(__file__).resolve().parents[1]
SECRET = b"b" * 32


def _progress(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child that writes a line to the inherited --ready-fd when serving."""
    r, w = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*argv, "--ready-fd", str(w)], stdout=out, stderr=out, pass_fds=(w,), env=env
        )
    os.close(w)
    ready, _, _ = select.select([r], [], [], 60)
    said = os.read(r, 16) if ready else b""
    os.close(r)
    if not said:
        proc.kill()
        raise SystemExit(f"bench: child did not start; see {log}")
    return proc


def _stats(latencies: list[float], wall: float) -> dict[str, float]:
    lat = sorted(latencies)
    return {
        "calls": len(lat),
        "per_s": round(len(lat) / wall, 1),
        "p50_ms": round(lat[len(lat) // 2] * 1e3, 3),
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 3),
        "mean_ms": round(statistics.fmean(lat) * 1e3, 3),
    }


def _run(
    clients: int, calls: int, make: Callable[[int], Callable[[int], object]]
) -> dict[str, float]:
    """``calls`` calls split over ``clients`` threads; ``make(t)`` gives thread t's call."""
    per = calls // clients
    lat: list[list[float]] = [[] for _ in range(clients)]
    fns = [make(t) for t in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def work(t: int) -> None:
        fn = fns[t]
        barrier.wait()
        for i in range(per):
            t0 = time.perf_counter()
            fn(i)
            lat[t].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(clients)]
    for th in threads:
        th.start()
    barrier.wait()
    start = time.perf_counter()
    for th in threads:
        th.join()
    return _stats([x for xs in lat for x in xs], time.perf_counter() - start)


# --- the bridge server (child process) -------------------------------------------------


def _serve_bridge_bench(directory: str, ready_fd: int) -> None:
    import trio

    from naga.v1 import ledger_pb2 as lpb
    from naga_core.daemon import Bridge, OwnerCredential, Unary

    empty = lpb.Head().SerializeToString()

    def plain(_raw: bytes, _ctx: grpc.ServicerContext) -> bytes:
        return empty

    plain_server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    plain_server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "bench.Plain", {"Ping": grpc.unary_unary_rpc_method_handler(plain)}
            ),
        )
    )
    plain_server.add_insecure_port(f"unix:{directory}/plain.sock")
    plain_server.start()

    async def main() -> None:
        bridge = Bridge(
            authorizer=OwnerCredential(SECRET),
            on_fatal=lambda e: None,
            threads=16,
            max_request_bytes=1 << 16,
            max_response_bytes=1 << 20,
        )
        bridge.add("bench.Bridged", [Unary("Ping", lpb.GetHeadRequest, lambda p, r: lpb.Head())])
        async with bridge.serving(f"unix:{directory}/bridged.sock", grace=1):
            os.write(ready_fd, b"ready\n")
            os.close(ready_fd)
            await trio.sleep_forever()  # until the bench kills this child

    trio.run(main)


def _bridge_figures(calls: int, clients: int, log: Path) -> dict[str, object]:
    directory = tempfile.mkdtemp(prefix="naga-bb-")
    proc = _spawn([sys.executable, __file__, "--serve-bridge-bench", directory], log)
    metadata = (("authorization", "Naga " + base64.b64encode(SECRET).decode()),)
    try:
        runs: dict[str, dict[str, dict[str, float]]] = {}
        for name in ("plain", "bridged"):
            method = f"/bench.{name.capitalize()}/Ping"
            channels = [
                grpc.insecure_channel(f"unix:{directory}/{name}.sock") for _ in range(clients)
            ]
            calls_of: list[grpc.UnaryUnaryMultiCallable[bytes, bytes]] = [
                ch.unary_unary(method) for ch in channels
            ]

            def make(
                t: int, fns: list[grpc.UnaryUnaryMultiCallable[bytes, bytes]] = calls_of
            ) -> Callable[[int], object]:
                fn = fns[t]
                return lambda _i: fn(b"", timeout=10, metadata=metadata)

            _run(1, 200, make)  # warm up
            runs[name] = {
                "1_client": _run(1, calls, make),
                f"{clients}_clients": _run(clients, calls, make),
            }
            for ch in channels:
                ch.close()
        p1, b1 = runs["plain"]["1_client"], runs["bridged"]["1_client"]
        pn, bn = runs["plain"][f"{clients}_clients"], runs["bridged"][f"{clients}_clients"]
        return {
            **runs,
            "overhead_p50_us": round((b1["p50_ms"] - p1["p50_ms"]) * 1e3, 1),
            "overhead_mean_us": round((b1["mean_ms"] - p1["mean_ms"]) * 1e3, 1),
            "throughput_ratio_1_client": round(b1["per_s"] / p1["per_s"], 3),
            f"throughput_ratio_{clients}_clients": round(bn["per_s"] / pn["per_s"], 3),
        }
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


# --- the real core -----------------------------------------------------------------------


def _core_figures(calls: int, clients: int, log: Path) -> dict[str, object]:
    from naga.sdk import Client

    root = tempfile.mkdtemp(prefix="naga-bc-")
    home = os.path.join(root, "home")
    proc = _spawn(
        [sys.executable, "-m", "naga_core.cli", "daemon", "start", "--foreground", "--home", home],
        log,
    )
    try:
        conns = [Client.connect(home) for _ in range(clients)]
        _progress(f"GetHead x {calls}")
        _run(1, 200, lambda t: lambda i: conns[t].head())
        head = _run(1, calls, lambda t: lambda i: conns[t].head())
        _progress(f"GetHead x {calls}, presenting a capability token")
        token = conns[0].mint("gateway", trust=TrustLevel.KNOWN, risk=Risk.R1, budget=10**6).token
        holder = Client.connect(home, credential=token)
        _run(1, 200, lambda t: lambda i: holder.head())
        head_token = _run(1, calls, lambda t: lambda i: holder.head())
        holder.close()
        names = ["agent.max_steps", "lanes.max_concurrent", "model.timeout_s", "gateway.port"]

        def setter(t: int) -> Callable[[int], object]:
            name = names[t % len(names)]
            c = conns[t]
            if name == "model.timeout_s":
                return lambda i: c.set_setting(name, float(1 + (i + t) % 3000))
            if name == "gateway.port":
                return lambda i: c.set_setting(name, 1024 + (i * clients + t) % 60000)
            # Distinct values per thread and call, so every call journals.
            return lambda i: c.set_setting(name, 1 + (i * clients + t) % 64)

        _progress(f"SetSetting x {calls // 2}, 1 client")
        one = _run(1, calls // 2, setter)
        _progress(f"SetSetting x {calls // 2}, {clients} clients")
        many = _run(clients, calls // 2, setter)
        size = conns[0].head().size
        conns[0].shutdown("bench done")
        proc.wait(30)
        return {
            "get_head": head,
            "get_head_with_token": head_token,
            "set_setting": {"1_client": one, f"{clients}_clients": many},
            "ledger_records_written": size,
        }
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


# --- the authorizer alone ----------------------------------------------------------------


def _authorizer_figures(count: int) -> dict[str, object]:
    """Token checks/s through CoreAuthorizer's three steps, as the bridge runs
    them for one call (in one thread here: no gRPC, no hop)."""
    from naga.v1 import authz_pb2 as apb
    from naga_core._home import Home
    from naga_core._store import open_ledger
    from naga_core.authz import AUTHZ_RATCHETS, TokenAuthority, ViolationPolicy, load_token_key
    from naga_core.daemon import OwnerCredential, TrustWatch
    from naga_core.kernel import RATCHETS, Actions, Kernel
    from naga_core.kernel import TrustLevel as KernelTrust

    root = tempfile.mkdtemp(prefix="naga-ba-")
    try:
        home = Home(os.path.join(root, "home"))
        with open_ledger(home, create=True) as ledger:
            kernel = Kernel.open(ledger, Actions(), ratchets=(*RATCHETS, *AUTHZ_RATCHETS))
            authority = TokenAuthority.over_kernel(
                kernel, load_token_key(home, create=True), clock=time.time_ns
            )
            authorizer = CoreAuthorizer(
                owner=OwnerCredential(SECRET),
                authority=authority,
                violations=ViolationPolicy.over(kernel),
                write=lambda fn: fn(),
                trust=TrustWatch.over_kernel(kernel),
            )
            kinds = {
                # role, trust, risk, session, tools, budget, expiry: 7 caveats
                "executor_7_caveats": (
                    authority.mint(
                        "executor",
                        trust=KernelTrust.KNOWN,
                        risk=Risk.R2,
                        session="s-1",
                        principal="wechat:bob",
                        tools=["model.chat", "web.search"],
                        budget=10**9,
                        ttl_ns=3600 * 10**9,
                    ),
                    "/naga.v1.AuthzService/Spend",
                    apb.SpendRequest(amount=1, session="s-1", tool="model.chat"),
                ),
                "gateway_3_caveats": (
                    authority.mint("gateway", trust=KernelTrust.KNOWN, risk=Risk.R1),
                    "/naga.v1.LedgerService/GetHead",
                    apb.InspectRequest(),
                ),
            }
            out: dict[str, object] = {}
            for name, (token, method, request) in kinds.items():
                value = "Capability " + base64.b64encode(token.to_bytes()).decode()
                check = functools.partial(
                    _check_once, authorizer, (("authorization", value),), method, request
                )
                best = 0.0
                for _ in range(3):
                    start = time.perf_counter()
                    for _ in range(count):
                        check()
                    best = max(best, count / (time.perf_counter() - start))
                out[name] = {"token_bytes": len(token.to_bytes()), "checks_per_s": round(best, 1)}
            return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _check_once(
    authorizer: CoreAuthorizer, metadata: tuple[tuple[str, str], ...], method: str, request: Message
) -> None:
    """One call's three authorizer steps, as the bridge runs them."""
    authorizer.authorize(metadata, method).check(request).admit()


def main() -> int:
    ap = argparse.ArgumentParser(description="naga-core RPC benchmark (one JSON object)")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--serve-bridge-bench", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_bridge_bench:
        _serve_bridge_bench(args.serve_bridge_bench, args.ready_fd)
        return 0
    log = Path(tempfile.mkdtemp(prefix="naga-bench-log-")) / "children.log"
    _progress("bridge vs plain grpcio handler")
    bridge = _bridge_figures(args.calls, args.clients, log)
    core = _core_figures(args.calls, args.clients, log)
    _progress(f"authorizer alone x {args.calls * 4}")
    authorizer = _authorizer_figures(args.calls * 4)
    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
        },
        "transport": "gRPC over a Unix socket; clients: threads of one process; server: another",
        **core,
        "bridge": bridge,
        "token_checks_through_the_authorizer": authorizer,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
