"""A compromised gateway (issue 11): the real gateway's entry point, launched
by the real core under ``Profile.gateway`` with the console's listening
socket handed to it, that first attacks the network from inside that
process, writes what each attack got into its work directory
(``attacks.json``), and then serves the console as the real one does.

The test writes ``targets.json`` into the work directory before the core
starts: a loopback TCP port and an abstract Unix socket name of the host
to reach. Everything is imported here, before the sandbox's filter."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import socket
from collections.abc import Callable

from naga_gateway.__main__ import main as gateway_main

TARGETS = "targets.json"
ATTACKS = "attacks.json"

_libc = ctypes.CDLL(None, use_errno=True)
#: (bind, listen) by architecture.
_SYSCALLS = {"x86_64": (49, 50), "aarch64": (200, 201)}
_SYS_BIND, _SYS_LISTEN = _SYSCALLS[platform.machine()]


def _outcome(attack: Callable[[], object]) -> str:
    try:
        attack()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
    return "ESCAPED"


def _raw(number: int, *args: int) -> None:
    if _libc.syscall(number, *args) == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _listen_unbound(family: int) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.listen()  # an ephemeral port on every interface, if it got this far


def _bind_any(family: int) -> None:
    host = "::" if family == socket.AF_INET6 else "0.0.0.0"
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))


def _connect(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def _udp(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"exfiltrated", ("127.0.0.1", port))


def _abstract(name: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("\0" + name)


def _listen_syscall_on_unix() -> None:
    # listen() itself, on the one kind of socket it may make: the filter's word.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        _raw(_SYS_LISTEN, s.fileno(), 1)


def _bind_syscall_on_unix() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        _raw(_SYS_BIND, s.fileno(), 0, 0)


def attacks(port: int, abstract: str) -> dict[str, str]:
    return {
        "listen_unbound_inet": _outcome(lambda: _listen_unbound(socket.AF_INET)),
        "listen_unbound_inet6": _outcome(lambda: _listen_unbound(socket.AF_INET6)),
        "bind_inet": _outcome(lambda: _bind_any(socket.AF_INET)),
        "bind_inet6": _outcome(lambda: _bind_any(socket.AF_INET6)),
        "socket_inet_dgram": _outcome(
            lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
        ),
        "socket_packet": _outcome(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()),
        "socket_netlink": _outcome(
            lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close()
        ),
        "connect_loopback_tcp": _outcome(lambda: _connect(port)),
        "send_loopback_udp": _outcome(lambda: _udp(port)),
        "connect_host_abstract": _outcome(lambda: _abstract(abstract)),
        "listen_syscall": _outcome(_listen_syscall_on_unix),
        "bind_syscall": _outcome(_bind_syscall_on_unix),
    }


def main(argv: list[str]) -> int:
    work = os.environ["HOME"]  # the launcher sets it to the work directory
    with open(os.path.join(work, TARGETS), encoding="utf-8") as f:
        targets = json.load(f)
    found = attacks(int(targets["port"]), str(targets["abstract"]))
    with open(os.path.join(work, ATTACKS), "w", encoding="utf-8") as f:
        json.dump(found, f)
    gateway_main(argv)
    return 0


def fill(argv: list[str]) -> int:
    """A compromised gateway that fills its work directory (the core's disk)
    with files each within its RLIMIT_FSIZE, then serves."""
    work = os.environ["HOME"]
    chunk = b"\0" * (1 << 20)
    for n in range(FILL_FILES):
        with open(os.path.join(work, f"fill-{n}"), "wb") as f:
            for _ in range(FILL_MIB):
                f.write(chunk)
    gateway_main(argv)
    return 0


FILL_FILES = 3
FILL_MIB = 4
