"""The child's filesystem view: a private mount namespace whose root holds
only the profile's paths, bind-mounted where they were, read-only except
the work directory, the devices and the core's socket.

Landlock (ABI <= 7) governs opening files but not connecting to Unix
sockets by path, so without this view a sandbox could reach any socket its
uid may write: a systemd user bus (which starts programs), ssh-agent,
docker.sock. Paths outside the view do not exist for the child at all.

Built like bubblewrap: open every source first, mount a tmpfs over /tmp as
the new root (our sources stay reachable through their descriptors),
bind-mount each source into it, then pivot_root into it and drop the old
root. Runs in the child, after unshare(CLONE_NEWNS), before capabilities
are dropped.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Sequence

import pyseccomp as seccomp  # pyright: ignore[reportMissingTypeStubs]

from sandbox._overlay import Overlay

_libc = ctypes.CDLL(None, use_errno=True)
_mount = _libc.mount
_mount.restype = ctypes.c_int
_mount.argtypes = (
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
)
_umount2 = _libc.umount2
_umount2.restype = ctypes.c_int
_umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)

# <sys/mount.h>
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 2
# <linux/mount.h>, for mount_setattr (Linux 5.12; same number everywhere)
_SYS_MOUNT_SETATTR = 442
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


#: statvfs flags of a mount that a remount inside a user namespace must
#: keep (the kernel locks them), and the mount flags that keep them.
_LOCKED = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)

#: Where the new root is assembled (in our private namespace only).
_SCAFFOLD = "/tmp"


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _mount(
            source.encode() if source is not None else None,
            target.encode(),
            fstype.encode() if fstype is not None else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {source or ''} on {target}",
    )


def _pivot_root(new_root: str, put_old: str) -> None:
    number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, "pivot_root")
    result = int(_libc.syscall(ctypes.c_long(number), new_root.encode(), put_old.encode()))
    _check(0 if result == 0 else -1, "pivot_root")


def top_level(paths: Sequence[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """The paths not already inside another one (those show through it),
    parents first."""
    kept: list[tuple[str, bool]] = []
    for path, writable in sorted(set(paths), key=lambda p: (p[0].count("/"), p[0])):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k, _ in kept):
            kept.append((path, writable))
    return kept


def _mount_point(target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, mode=0o755, exist_ok=True)
        return
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))


def _make_read_only(target: str, fd: int, mode: int) -> None:
    """Read-only, nosuid (and nodev unless it is a device), submounts included."""
    device = stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
    attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | (0 if device else MOUNT_ATTR_NODEV))
    result = int(
        _libc.syscall(
            ctypes.c_long(_SYS_MOUNT_SETATTR),
            ctypes.c_int(_AT_FDCWD),
            target.encode(),
            ctypes.c_uint(_AT_RECURSIVE),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
    )
    if result == 0:
        return
    err = ctypes.get_errno()
    if err != errno.ENOSYS:
        raise OSError(err, f"make {target} read-only: {os.strerror(err)}")
    # Before Linux 5.12: a remount, which covers the top mount only.
    mount(None, target, None, remount_flags(fd, mode))


def remount_flags(fd: int, mode: int) -> int:
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID
    if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
        flags |= MS_NODEV
    current = os.fstatvfs(fd).f_flag
    for st_flag, ms_flag in _LOCKED:
        if current & st_flag:
            flags |= ms_flag
    return flags


def _write_file(path: str, content: bytes, shown: Sequence[tuple[str, bool]]) -> None:
    """``path`` made in the scaffold's own tmpfs. One inside a shown path
    would be written through its bind mount into the host's directory: refused."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or path == "/":
        raise OSError(errno.EINVAL, f"view file {path!r}: not a plain absolute path")
    for top, _ in shown:
        if path == top or path.startswith(top.rstrip("/") + "/"):
            raise OSError(errno.EINVAL, f"view file {path}: inside the shown path {top}")
    target = _SCAFFOLD + path
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, content)
    finally:
        os.close(fd)


def enter_view(
    paths: Sequence[tuple[str, bool]],
    cwd: str,
    overlays: Sequence[tuple[Overlay, str]] = (),
    files: Sequence[tuple[str, bytes]] = (),
) -> None:
    """Replace this process's root with one holding only ``paths``
    (``(path, writable)``) and ``files`` (``(path, content)``, written in
    the new root itself), and change into ``cwd``; each of ``overlays``
    (an overlay and its target) mounted first, so a path may show one."""
    # Nothing we mount may propagate back into the host's namespace.
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    for overlay, target in overlays:
        mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, overlay.data())
    sources: list[tuple[str, bool, int]] = []
    shown = top_level(paths)
    try:
        for path, writable in shown:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError as e:
                raise OSError(e.errno, f"view path {path}: {e.strerror}") from e
            sources.append((path, writable, fd))
        mount("tmpfs", _SCAFFOLD, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        # Before any bind mount: the scaffold's directories are still its own.
        for path, content in files:
            _write_file(path, content, shown)
        for path, writable, fd in sources:
            target = _SCAFFOLD + path
            mode = os.fstat(fd).st_mode
            _mount_point(target, stat.S_ISDIR(mode))
            mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
            if not writable:
                _make_read_only(target, fd, mode)
    finally:
        for _, _, fd in sources:
            os.close(fd)
    # pivot_root(".", "."): the old root ends up stacked on the new one and
    # is detached at once, so no directory is needed to park it in.
    os.chdir(_SCAFFOLD)
    _pivot_root(".", ".")
    _check(_umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(cwd)
