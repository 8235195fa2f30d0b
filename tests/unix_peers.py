"""Which Unix-socket connections a process holds to a listening socket,
read from the kernel, never from the code under test.

An accepted end carries its listener's address, and lives in the network
namespace of the process that connected. In this process's namespace,
NETLINK_SOCK_DIAG (what ``ss -x`` reads) names each socket's peer and
bound file, so a process's ends (/proc/PID/fd) are paired with the
listener's. A sandboxed process has a namespace of its own, which holds
only its sockets and the accepted ends of its connections: those are the
entries of /proc/PID/net/unix bound to the listener's name."""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_UDIAG_SHOW_NAME = 0x1
_UDIAG_SHOW_VFS = 0x2
_UDIAG_SHOW_PEER = 0x4
_UNIX_DIAG_NAME = 0
_UNIX_DIAG_VFS = 1
_UNIX_DIAG_PEER = 2
_NLMSG_HEADER = struct.Struct("=IHHII")
_UNIX_DIAG_REQ = struct.Struct("=BBHIIIII")
_UNIX_DIAG_MSG = struct.Struct("=BBBBIII")
_RTATTR = struct.Struct("=HH")


@dataclass(frozen=True)
class UnixSocket:
    inode: int
    #: The bound path ("" for a client's end); an accepted end has its listener's.
    path: str
    #: (device, inode) of the bound file, as os.stat gives them; None if unbound.
    file: tuple[int, int] | None
    #: The inode of the other end (0 if not connected).
    peer: int


def unix_sockets() -> dict[int, UnixSocket]:
    """Every Unix socket of this network namespace, by inode."""
    found: dict[int, UnixSocket] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
        request = _UNIX_DIAG_REQ.pack(
            socket.AF_UNIX,
            0,
            0,
            0xFFFFFFFF,
            0,
            _UDIAG_SHOW_NAME | _UDIAG_SHOW_VFS | _UDIAG_SHOW_PEER,
            0,
            0,
        )
        header = _NLMSG_HEADER.pack(
            _NLMSG_HEADER.size + len(request),
            _SOCK_DIAG_BY_FAMILY,
            _NLM_F_REQUEST | _NLM_F_DUMP,
            1,
            0,
        )
        nl.sendall(header + request)
        while True:
            data = nl.recv(1 << 16)
            offset = 0
            while offset < len(data):
                length, kind, _flags, _seq, _pid = _NLMSG_HEADER.unpack_from(data, offset)
                if kind == _NLMSG_DONE:
                    return found
                if kind == _NLMSG_ERROR:
                    raise OSError("sock_diag refused the dump")
                body = data[offset + _NLMSG_HEADER.size : offset + length]
                entry = _parse(body)
                found[entry.inode] = entry
                offset += (length + 3) & ~3


def _parse(body: bytes) -> UnixSocket:
    _family, _type, _state, _pad, inode, _c0, _c1 = _UNIX_DIAG_MSG.unpack_from(body)
    path, peer = "", 0
    file: tuple[int, int] | None = None
    at = _UNIX_DIAG_MSG.size
    while at + _RTATTR.size <= len(body):
        length, kind = _RTATTR.unpack_from(body, at)
        value = body[at + _RTATTR.size : at + length]
        if kind == _UNIX_DIAG_NAME:
            path = value.rstrip(b"\0").decode(errors="replace")
        elif kind == _UNIX_DIAG_VFS:
            vfs_inode, vfs_dev = struct.unpack("=II", value[:8])
            # The kernel's own dev_t (major << 20 | minor), not stat's encoding.
            file = (os.makedev(vfs_dev >> 20, vfs_dev & 0xFFFFF), vfs_inode)
        elif kind == _UNIX_DIAG_PEER:
            (peer,) = struct.unpack("=I", value[:4])
        at += (length + 3) & ~3
    return UnixSocket(inode, path, file, peer)


def socket_inodes(pid: int) -> dict[int, int]:
    """The socket inodes a process holds, each with one of its descriptors."""
    held: dict[int, int] = {}
    fd_dir = f"/proc/{pid}/fd"
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            held[int(target[8:-1])] = int(name)
    return held


def accepted_ends(pid: int, listener_path: str) -> set[int]:
    """The inodes of the listener's ends of ``pid``'s connections to the
    socket file at ``listener_path`` (the file's inode identifies it: a
    listener may be bound to a temporary name and renamed into place)."""
    st = os.stat(listener_path)
    listener = (st.st_dev, st.st_ino)
    here = unix_sockets()
    names = {s.path for s in here.values() if s.file == listener}
    if not names:
        raise AssertionError(f"nothing listens on {listener_path}")
    if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
        theirs = set(socket_inodes(pid))
        return {s.inode for s in here.values() if s.file == listener and s.peer in theirs}
    return {inode for inode, path in _proc_net_unix(pid) if path in names}


def _proc_net_unix(pid: int) -> list[tuple[int, str]]:
    """(inode, bound path) of every Unix socket in ``pid``'s network namespace."""
    out: list[tuple[int, str]] = []
    with open(f"/proc/{pid}/net/unix") as f:
        next(f)  # the header
        for line in f:
            fields = line.split(maxsplit=7)
            out.append((int(fields[6]), fields[7].strip() if len(fields) > 7 else ""))
    return out


__all__ = ["UnixSocket", "accepted_ends", "socket_inodes", "unix_sockets"]
