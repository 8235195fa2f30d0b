"""Every route to a datagram on the host's network from an egress plugin
(Landlock's network rules cover TCP only), run inside the real worker by
the hostile plugin's ``hostile.datagrams`` tool. Each route answers the
errno name it got, or ``SENT`` when a datagram left (an escape). Imported
before the filter, like the rest of the hostile plugin."""

from __future__ import annotations

import ctypes
import errno
import socket
from collections.abc import Callable

import pyseccomp  # pyright: ignore[reportMissingTypeStubs]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

_IPPROTO_UDPLITE = 136
_AF_VSOCK = 40
_NETLINK_ROUTE = 0
_SYS = {
    name: int(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name))
    for name in ("socket", "sendmmsg", "io_uring_setup")
}
PAYLOAD = b"exfiltrated"


class _Iovec(ctypes.Structure):
    _fields_ = (("base", ctypes.c_void_p), ("len", ctypes.c_size_t))


class _Msghdr(ctypes.Structure):
    _fields_ = (
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(_Iovec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    )


class _Mmsghdr(ctypes.Structure):
    _fields_ = (("hdr", _Msghdr), ("len", ctypes.c_uint))


class _SockaddrIn(ctypes.Structure):
    _fields_ = (
        ("family", ctypes.c_uint16),
        ("port", ctypes.c_uint16),
        ("addr", ctypes.c_uint32),
        ("zero", ctypes.c_char * 8),
    )


def _syscall(number: int, *args: int) -> int:
    result = int(_libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args)))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"syscall {number}")
    return result


def _outcome(route: Callable[[], object]) -> str:
    try:
        route()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "SENT"


def routes(port: int) -> dict[str, str]:
    """Each route's outcome against a UDP listener on 127.0.0.1:``port``."""
    v4 = ("127.0.0.1", port)

    def sendto(family: int, kind: int, proto: int = 0, address: tuple[str, int] = v4) -> None:
        with socket.socket(family, kind, proto) as s:
            s.sendto(PAYLOAD, address)

    def connect_send() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(v4)
            s.send(PAYLOAD)

    def sendmsg() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendmsg([PAYLOAD], [], 0, v4)

    def sendmmsg() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            buf = ctypes.create_string_buffer(PAYLOAD)
            iov = _Iovec(ctypes.addressof(buf), len(PAYLOAD))
            addr = _SockaddrIn(socket.AF_INET, socket.htons(port), 0x0100007F, b"")
            msg = _Mmsghdr(
                _Msghdr(
                    ctypes.addressof(addr),
                    ctypes.sizeof(addr),
                    ctypes.pointer(iov),
                    1,
                    None,
                    0,
                    0,
                ),
                0,
            )
            _syscall(_SYS["sendmmsg"], s.fileno(), ctypes.addressof(msg), 1, 0)

    def raw_syscall_socket() -> None:
        # The socket syscall itself, past Python's socket module.
        fd = _syscall(_SYS["socket"], socket.AF_INET, socket.SOCK_DGRAM, 0)
        with socket.socket(fileno=fd) as s:
            s.sendto(PAYLOAD, v4)

    def io_uring() -> None:
        # io_uring's own socket and sendmsg operations never pass the filter.
        params = ctypes.create_string_buffer(120)
        _syscall(_SYS["io_uring_setup"], 8, ctypes.addressof(params))

    flagged = socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
    return {
        "udp": _outcome(lambda: sendto(socket.AF_INET, socket.SOCK_DGRAM)),
        "udp_proto": _outcome(
            lambda: sendto(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        ),
        "udp_flags": _outcome(lambda: sendto(socket.AF_INET, flagged)),
        "udp_connect_send": _outcome(connect_send),
        "udp_sendmsg": _outcome(sendmsg),
        "udp_sendmmsg": _outcome(sendmmsg),
        "udp6_mapped": _outcome(
            lambda: sendto(socket.AF_INET6, socket.SOCK_DGRAM, 0, ("::ffff:127.0.0.1", port))
        ),
        "udplite": _outcome(lambda: sendto(socket.AF_INET, socket.SOCK_DGRAM, _IPPROTO_UDPLITE)),
        "icmp_ping": _outcome(
            lambda: sendto(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP, ("127.0.0.1", 0))
        ),
        "raw_udp": _outcome(lambda: sendto(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)),
        "raw_syscall": _outcome(raw_syscall_socket),
        "packet": _outcome(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM).close()),
        "netlink": _outcome(
            lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_ROUTE).close()
        ),
        "vsock": _outcome(lambda: socket.socket(_AF_VSOCK, socket.SOCK_DGRAM).close()),
        "io_uring_setup": _outcome(io_uring),
    }


def lookups(names: list[str]) -> dict[str, str]:
    """How each name resolves inside the worker: its addresses, or the error."""
    seen: dict[str, str] = {}
    for name in names:
        try:
            found = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            seen[name] = f"gaierror {exc.errno}"
            continue
        seen[name] = " ".join(sorted({str(f[4][0]) for f in found}))
    return seen
