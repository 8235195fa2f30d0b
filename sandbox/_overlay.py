"""A staging overlay for a shell command's writes (ADR 0034).

The command's work directory is an overlayfs mounted by the sandbox child
in its own mount namespace (after the namespace is made private, before
the view is built): the live workspace is the read-only lower layer, an
empty directory of the core's the upper one. Every write the command makes,
through any path, descriptor or link inside its view, lands in the upper
directory: files copied up whole, removals as whiteouts (0/0 character
devices), replaced directories marked opaque. The lower layer is never
written; the mount dies with the child's namespace.

The options keep the upper directory self-describing: ``userxattr`` (the
marks are ``user.overlay.*``, which the mounter may set inside a user
namespace and the core reads without privilege), no redirects (a renamed
lower directory is copied, its old name whited out: ``rename`` answers
EXDEV and ``mv`` falls back to copying), no metacopy (a chmod copies the
data up too), no index, no xino.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import dataclass

from sandbox.errors import ProfileInvalid

#: The mount options after the three directories (see the module doc).
OPTIONS = "userxattr,redirect_dir=nofollow,metacopy=off,index=off,xino=off"
#: The extended attribute of an upper directory that hides the lower one.
OPAQUE_XATTR = "user.overlay.opaque"
#: Characters the option string cannot carry in a path (',' separates
#: options, ':' lower layers, '\\' escapes; a newline has no place there).
_UNSAFE = frozenset(",:\\\n")
_PROBE_TIMEOUT_S = 10.0


def _directory(path: str, what: str) -> str:
    if not path or "\0" in path or not os.path.isabs(path):
        raise ProfileInvalid(f"the overlay's {what} must be an absolute path, got {path!r}")
    if _UNSAFE & set(path):
        raise ProfileInvalid(
            f"the overlay's {what} {path!r} holds one of , : \\ or a newline, "
            "which overlayfs options cannot carry"
        )
    if not os.path.isdir(path):
        raise ProfileInvalid(f"the overlay's {what} is not a directory: {path}")
    return os.path.realpath(path)


@dataclass(frozen=True, slots=True)
class Overlay:
    """Mount ``lower`` (read-only) under ``upper`` (the writes), ``work``
    being overlayfs's own scratch directory on the upper's filesystem."""

    lower: str
    upper: str
    work: str

    @classmethod
    def of(cls, lower: str, upper: str, work: str) -> Overlay:
        """Checked: absolute existing directories, none inside another, no
        character the option string cannot carry."""
        dirs = (
            _directory(lower, "lower directory"),
            _directory(upper, "upper directory"),
            _directory(work, "work directory"),
        )
        for i, a in enumerate(dirs):
            for b in dirs[i + 1 :]:
                if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
                    raise ProfileInvalid(f"the overlay's directories {a} and {b} overlap")
        return cls(*dirs)

    def data(self) -> str:
        """The mount(2) data string."""
        return f"lowerdir={self.lower},upperdir={self.upper},workdir={self.work},{OPTIONS}"


#: Runs in a fresh interpreter: a mount namespace (in a user namespace of its
#: own when not root), the overlay on argv's directories, one file written
#: through it; exit 0 when the file landed in the upper directory only.
_PROBE = """
import ctypes, os, sys
lower, upper, work, merged, data, root = sys.argv[1:7]
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
flags = 0x00020000 | (0 if root == "1" else 0x10000000)
if libc.unshare(flags) != 0:
    sys.exit(2)
if root != "1":
    open("/proc/self/setgroups", "w").write("deny")
    open("/proc/self/uid_map", "w").write(f"{uid} {uid} 1")
    open("/proc/self/gid_map", "w").write(f"{gid} {gid} 1")
if libc.mount(None, b"/", None, 0x4000 | 0x40000, None) != 0:
    sys.exit(3)
if libc.mount(b"overlay", merged.encode(), b"overlay", 6, data.encode()) != 0:
    sys.exit(4)
with open(os.path.join(merged, "probe"), "w") as f:
    f.write("x")
os.unlink(os.path.join(merged, "seed"))
sys.exit(0)
"""


def probe(scratch: str, *, root: bool) -> str | None:
    """None when a staging overlay works here (tried under ``scratch``, an
    empty directory left as it was found); else why not, in words."""
    try:
        return _probe(scratch, root=root)
    except (OSError, subprocess.SubprocessError, ProfileInvalid) as exc:
        return f"the overlay probe failed: {exc}"
    finally:
        _empty(scratch)


def _probe(scratch: str, *, root: bool) -> str | None:
    lower, upper, work, merged = (os.path.join(scratch, n) for n in ("l", "u", "w", "m"))
    for d in (lower, upper, work, merged):
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(lower, "seed"), "w") as f:
        f.write("seed")
    overlay = Overlay.of(lower, upper, work)
    argv = [lower, upper, work, merged, overlay.data(), "1" if root else "0"]
    child = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PROBE, *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={},
        timeout=_PROBE_TIMEOUT_S,
        check=False,
    )
    if child.returncode != 0:
        step = {2: "unshare", 3: "a private mount namespace", 4: "mount overlay"}
        why = step.get(child.returncode, f"the probe (exit {child.returncode})")
        return f"{why} failed: {child.stderr.decode(errors='replace').strip()[-200:]}"
    whiteout = os.lstat(os.path.join(upper, "seed"))
    if not (
        os.path.exists(os.path.join(upper, "probe"))
        and os.path.exists(os.path.join(lower, "seed"))
        and not os.path.exists(os.path.join(lower, "probe"))
        and stat.S_ISCHR(whiteout.st_mode)
        and os.major(whiteout.st_rdev) == 0
        and os.minor(whiteout.st_rdev) == 0
    ):
        return "the overlay's writes did not land in its upper directory"
    return None


def _empty(path: str) -> None:
    for entry, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.unlink(os.path.join(entry, name))
        for name in dirs:
            full = os.path.join(entry, name)
            if os.path.islink(full):
                os.unlink(full)
            else:
                os.chmod(full, 0o700)
                os.rmdir(full)


__all__ = ["OPAQUE_XATTR", "OPTIONS", "Overlay", "probe"]
