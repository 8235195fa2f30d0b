"""Ordinary work a sandboxed process must still be able to do (targets for
tests/sandbox/test_launcher.py). Each writes one line to ``args[0]``."""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading

import grpc
import trio


def _report(fd: str, line: str) -> int:
    os.write(int(fd), line.encode() + b"\n")
    return 0


def everyday(args: list[str]) -> int:
    """Threads, a trio event loop with a socket pair and a worker thread,
    files in the work directory, a read-only file, the CPU count."""
    fd, read_only_file = args
    box: list[int] = []
    worker = threading.Thread(target=lambda: box.append(sum(range(1000))))
    worker.start()
    worker.join()

    async def loop() -> bytes:
        a, b = trio.socket.socketpair()
        with a, b:
            await a.send(b"ping")
            got = await b.recv(4)
        await trio.to_thread.run_sync(lambda: None)
        return got

    got = trio.run(loop)
    os.makedirs("sub/dir", exist_ok=True)
    with open("sub/dir/out.txt", "w", encoding="utf-8") as f:
        f.write("written")
    os.rename("sub/dir/out.txt", "sub/out.txt")
    with open(read_only_file, encoding="utf-8") as f:
        data = f.read().strip()
    with open(os.devnull, "w", encoding="utf-8") as f:
        f.write("discarded")
    return _report(fd, f"{box[0]} {got.decode()} {data} {(os.cpu_count() or 0) > 0}")


def environment(args: list[str]) -> int:
    return _report(args[0], " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())))


def descriptor(args: list[str]) -> int:
    fd, probe = args
    try:
        os.fstat(int(probe))
    except OSError as e:
        return _report(fd, errno.errorcode.get(e.errno or 0, "?"))
    return _report(fd, "open")


def session(args: list[str]) -> int:
    return _report(args[0], str(os.getsid(0) == os.getpid()))


def echo_lines(args: list[str]) -> int:
    """Each line read from ``args[0]`` written back to ``args[1]``, until EOF."""
    with os.fdopen(int(args[0]), "rb") as lines, os.fdopen(int(args[1]), "wb") as out:
        for line in lines:
            out.write(line)
            out.flush()
    return 0


def grpc_echo(args: list[str]) -> int:
    """A gRPC call to the core over its Unix socket, as an executor makes."""
    with grpc.insecure_channel("unix:" + os.environ["NAGA_CORE_SOCKET"]) as channel:
        echo: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/test.Echo/Echo")
        reply = echo(b"ping", timeout=10)
    return _report(args[0], reply.decode())


def tcp_connect(args: list[str]) -> int:
    fd, port = args
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as s:
        s.sendall(b"hello")
    return _report(fd, "sent")


def serve_once(args: list[str]) -> int:
    """A gateway's work: serve one echo on the listening socket it was handed;
    a TCP socket of its own is refused."""
    fd, listen_fd = args
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        refused = "ESCAPED"
    except OSError as e:
        refused = errno.errorcode.get(e.errno or 0, "?")
    with socket.socket(fileno=int(listen_fd)) as server:
        _report(fd, f"serving, own socket {refused}")
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"echo:" + conn.recv(5))
    return 0


def exit_with(args: list[str]) -> int:
    return int(args[1])


def fail(args: list[str]) -> int:
    sys.stderr.write("about to fail\n")
    raise RuntimeError("the target failed")


def hoard(args: list[str]) -> int:
    """Touch memory 4 MiB at a time until something stops it."""
    held: list[bytes] = []
    try:
        while True:
            held.append(b"\x5a" * (4 << 20))
    except MemoryError:
        held.clear()
        return _report(args[0], "MemoryError")


def spin(args: list[str]) -> int:
    """Burn CPU on one thread until ``args[0]`` (a pipe) reaches its end
    (bench/nice_ranking.py: how the kernel shares a CPU with the core)."""
    fd = int(args[0])
    os.set_blocking(fd, False)
    n = 0
    while True:
        n += 1
        if n % 100_000 == 0:
            try:
                if os.read(fd, 1) == b"":
                    return 0
            except BlockingIOError:
                pass
