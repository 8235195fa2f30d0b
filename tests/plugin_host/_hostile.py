"""The hostile plugin of issue 11 (manifest: tests/plugin_host/test_hostile_home.py
and test_limits.py): attacks that got through the landed sandbox, run from
inside a real sandboxed worker under a real core. Everything is imported
here, before the sandbox's filter."""

from __future__ import annotations

import base64
import errno
import fcntl
import os
import ssl
import stat
import struct
import threading
import time
from collections.abc import Callable

from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga.tokens import Token
from naga.v1 import plugin_pb2 as pb
from naga_plugins import Plugin, ToolFailed
from tests.plugin_host import _datagrams
from tests.sandbox import _attacks

#: Its manifest; ``{port}`` is the one egress port it declares.
MANIFEST = """\
name = "hostile"
version = "1.0.0"
kind = "tool"
description = "Attacks of issue 11 (tests only)"
entry = "tests.plugin_host._hostile:main"
capabilities = ["core"]

[[egress]]
host = "127.0.0.1"
port = {port}

[[tools]]
name = "hostile.fastopen"
risk = "R1"
description = "TCP Fast Open to 127.0.0.1:port"
[tools.params.port]
type = "integer"
minimum = 1
maximum = 65535

[[tools]]
name = "hostile.datagrams"
risk = "R1"
description = "Every route to a UDP datagram at 127.0.0.1:port; and name lookups"
[tools.params.port]
type = "integer"
minimum = 1
maximum = 65535
[tools.params.names]
type = "string"

[[tools]]
name = "hostile.stderr"
risk = "R1"
description = "Attack its stderr, then write a line to it"
[tools.params.line]
type = "string"

[[tools]]
name = "hostile.token"
risk = "R1"
description = "Its capability token"

[[tools]]
name = "hostile.ssl"
risk = "R0"
description = "What of /etc/ssl it sees"
[[tools]]
name = "hostile.subscribe"
risk = "R1"
description = "Open Subscribe streams with its token and hold them"
[tools.params.streams]
type = "integer"
minimum = 1
maximum = 64

[[tools]]
name = "hostile.spin"
risk = "R1"
description = "A thread burning CPU forever"

[[tools]]
name = "hostile.threads"
risk = "R1"
description = "Start threads that sleep"
[tools.params.count]
type = "integer"
minimum = 1
maximum = 100000

[[tools]]
name = "hostile.fill"
risk = "R1"
description = "Fill its work directory"
[tools.params.files]
type = "integer"
minimum = 1
maximum = 1000
[tools.params.mib]
type = "integer"
minimum = 1
maximum = 1024

[[tools]]
name = "hostile.wait"
risk = "R0"
description = "Sleep (until the supervisor ends the worker)"
[tools.params.seconds]
type = "number"
minimum = 0
maximum = 60

[[tools]]
name = "hostile.reach"
risk = "R1"
description = "Reach for paths outside its work directory, by every route"
[tools.params.paths]
type = "string"
[tools.params.core_pid]
type = "integer"
minimum = 1

[[tools]]
name = "hostile.flood"
risk = "R1"
description = "Flood the core with valid frames"
[tools.params.kind]
type = "string"
[tools.params.seconds]
type = "number"
minimum = 0
maximum = 60
"""

plugin = Plugin("hostile")
#: Streams and threads a tool left running for the next tool (or the test).
_held: list[object] = []


def _name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc))


@plugin.tool("hostile.fastopen")
def fastopen(port: int) -> str:
    try:
        return _attacks.tcp_fastopen(str(port))
    except _attacks.Escaped as exc:
        return f"ESCAPED: {exc}"


@plugin.tool("hostile.datagrams")
def datagrams(port: int, names: str) -> dict[str, object]:
    return {"routes": _datagrams.routes(port), "lookups": _datagrams.lookups(names.split())}


@plugin.tool("hostile.stderr")
def stderr(line: str) -> dict[str, object]:
    """What fd 2 is, and what the worker can do to it: seek to the head,
    clear O_APPEND and truncate (each the errno it got, or "done")."""
    mode = os.fstat(2).st_mode
    outcome: dict[str, object] = {"pipe": stat.S_ISFIFO(mode), "regular": stat.S_ISREG(mode)}

    def attempt(what: str, fn: object) -> None:
        assert callable(fn)
        try:
            fn()
            outcome[what] = "done"
        except OSError as exc:
            outcome[what] = _name(exc)

    attempt("seek", lambda: os.lseek(2, 0, os.SEEK_SET))
    flags = fcntl.fcntl(2, fcntl.F_GETFL)
    attempt("clear_append", lambda: fcntl.fcntl(2, fcntl.F_SETFL, flags & ~os.O_APPEND))
    outcome["append"] = bool(fcntl.fcntl(2, fcntl.F_GETFL) & os.O_APPEND)
    attempt("truncate", lambda: os.ftruncate(2, 0))
    os.write(2, line.encode() + b"\n")
    return outcome


@plugin.tool("hostile.token")
def token() -> str:
    raw = plugin.capability_token()
    if raw is None:
        raise ToolFailed("no token")
    return base64.b64encode(raw).decode()


@plugin.tool("hostile.subscribe")
def subscribe(streams: int) -> dict[str, int]:
    """Open ``streams`` Subscribe streams to the core with this worker's
    token and keep them open; how many the core admitted and refused."""
    raw = plugin.capability_token()
    where = plugin.core_socket()
    if raw is None or where is None:
        raise ToolFailed("no token or core socket")
    client = Client.connect(where, Token.from_bytes(raw))
    _held.append(client)
    opened = refused = 0
    for _ in range(streams):
        sub = client.subscribe(from_seq=0)
        try:
            next(iter(sub))  # admitted once the first event arrives
        except SdkError:
            refused += 1
            continue
        _held.append(sub)
        opened += 1
    return {"opened": opened, "refused": refused}


@plugin.tool("hostile.spin")
def spin() -> str:
    """A background thread that burns CPU forever."""

    def burn() -> None:
        n = 0
        while True:
            n += 1

    threading.Thread(target=burn, daemon=True).start()
    return "spinning"


@plugin.tool("hostile.threads")
def threads(count: int) -> int:
    """Start ``count`` threads that sleep forever; how many started."""
    threading.stack_size(64 << 10)
    started = 0
    try:
        for _ in range(count):
            t = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
            t.start()
            _held.append(t)
            started += 1
    except RuntimeError:
        pass
    return started


@plugin.tool("hostile.fill")
def fill(files: int, mib: int) -> int:
    """Write ``files`` files of ``mib`` MiB into the work directory; MiB written."""
    chunk = b"\x01" * (1 << 20)
    written = 0
    try:
        for n in range(files):
            with open(os.path.join(plugin.work_dir(), f"fill-{n}"), "wb") as f:
                for _ in range(mib):
                    f.write(chunk)
                    written += 1
    except OSError:
        pass
    return written


def _core_socket() -> int:
    # The socket pair end the core passed (the first socket descriptor; the
    # flood runs in a worker that opened no other).
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                return fd
        except OSError:
            continue
    raise ToolFailed("no socket found")


def _frame(message: pb.PluginToCore) -> bytes:
    body = message.SerializeToString()
    return struct.pack(">I", len(body)) + body


@plugin.tool("hostile.wait")
def wait(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


@plugin.tool("hostile.flood")
def flood(kind: str, seconds: float) -> int:
    """Write valid frames to the core as fast as it takes them, for
    ``seconds`` (``pong``: Pongs nobody asked for; ``progress``: progress
    of this very call); frames sent."""
    if kind == "pong":
        frame = _frame(pb.PluginToCore(pong=pb.Pong(nonce=0)))
        fd = _core_socket()
        batch = frame * 512
        sent = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            os.write(fd, batch)
            sent += 512
        return sent
    if kind == "progress":
        call = plugin.current_call()
        call.progress("flooding")
        with open(os.path.join(plugin.work_dir(), "flooding"), "wb"):
            pass  # the test measures from here on
        sent = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            call.progress(".")
            sent += 1
        return sent
    raise ToolFailed(f"no flood {kind!r}")


@plugin.tool("hostile.ssl")
def ssl_view() -> dict[str, object]:
    """What of /etc/ssl the worker sees."""
    seen: dict[str, object] = {}
    for path in ("/etc/ssl/private", "/etc/ssl/openssl.cnf", "/etc/pki"):
        seen[path] = "present" if os.path.lexists(path) else "absent"
    # TLS still finds the system's CA bundle.
    seen["ca_certs"] = len(ssl.create_default_context().get_ca_certs())
    return seen


def _try(fn: Callable[..., object], *args: str) -> str:
    try:
        fn(*args)
    except OSError as exc:
        return _name(exc)
    except _attacks.Escaped as exc:
        return f"ESCAPED: {exc}"
    return "DONE"


def _read(path: str) -> None:
    with open(path, "rb") as f:
        f.read(64)


def _via_symlink(path: str, link: str) -> None:
    os.symlink(path, link)  # in its own work directory: allowed
    _read(link)


@plugin.tool("hostile.reach")
def reach(paths: str, core_pid: int) -> dict[str, str]:
    """For each path (one a line): read it, list it, and read it through a
    symlink and a hard link made in its own work directory; then the core's
    /proc entries, userfaultfd and memfd_create-then-exec. Each the errno it
    got, or what it managed ("DONE")."""
    seen: dict[str, str] = {}
    for i, path in enumerate(p for p in paths.splitlines() if p):
        seen[f"read {path}"] = _try(_read, path)
        seen[f"list {path}"] = _try(os.listdir, path)
        seen[f"symlink {path}"] = _try(_via_symlink, path, f"link-{i}")
        seen[f"hardlink {path}"] = _try(os.link, path, f"hard-{i}")
    for rel in ("environ", "fd", "mem", "maps", "root"):
        seen[f"/proc/core/{rel}"] = _try(os.listdir, f"/proc/{core_pid}/{rel}")
    seen["/proc/self/fd"] = _try(os.listdir, "/proc/self/fd")
    # Sockets (it has egress, so TCP sockets of its own): serve nothing.
    seen["listen_unbound"] = _attacks.listen_unbound()
    seen["tcp_bind"] = _attacks.tcp_bind("0")
    seen["raw_sockets"] = _attacks.raw_socket()
    seen["signals"] = _attacks.signal_routes(str(core_pid))
    seen["userfaultfd"] = _attacks.kernel_surface("userfaultfd")
    seen["memfd_exec"] = _try(_attacks.memfd_exec)
    return seen


main = plugin.main
