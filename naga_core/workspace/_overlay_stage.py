"""A shell command's writes, staged in an overlay's upper directory, read
back as staged writes over the live tree (ADR 0034).

:meth:`OverlayStage.prepare` leaves three empty directories: ``upper`` (the
writes), ``work`` (overlayfs's own), ``merged`` (the mount point the command
works in; the sandbox child mounts the overlay there in its namespace).
After the command :meth:`OverlayStage.staged` reads only the upper
directory, so its cost is what the command wrote, not the workspace's size:

* a file or symlink there: the path's new content (a copy-up that changed
  nothing is dropped by the capture, which compares with the live tree);
* a whiteout (a 0/0 character device): the path is gone;
* an opaque directory (``user.overlay.opaque``): a directory that replaced
  whatever was there, so a live entry under it that the upper directory
  does not list is gone;
* any other directory: the live one with some entries changed;
* a fifo or a socket: nothing a workspace holds, so the path is gone (as
  a staged copy, which skips them, has it);
* a redirect or metacopy mark (the mount options turn them off):
  refused, so nothing is captured half.
"""

from __future__ import annotations

import errno
import os
import stat

from naga_core.workspace._changes import Staged
from naga_core.workspace._errors import PathRefused, Reason
from naga_core.workspace._stage import clear_dir
from naga_core.workspace._tree import read_node
from sandbox import OPAQUE_XATTR

#: Marks the options turn off; finding one means the upper is not ours to read.
#: (``origin``, which a copy-up records, only names the lower file: harmless.)
_FOREIGN = ("user.overlay.redirect", "user.overlay.metacopy")


def _xattr(path: str, name: str) -> bytes | None:
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EPERM):
            return None
        raise


class OverlayStage:
    def __init__(self, live: str, stage: str) -> None:
        self.live = live
        self.stage = stage
        self.upper = os.path.join(stage, "upper")
        self.work = os.path.join(stage, "work")
        self.merged = os.path.join(stage, "merged")

    def prepare(self) -> None:
        os.makedirs(self.stage, mode=0o700, exist_ok=True)
        clear_dir(self.stage)
        for d in (self.upper, self.work, self.merged):
            os.mkdir(d, 0o700)

    def staged(self) -> dict[str, Staged]:
        """What the command changed, as staged writes over the live tree."""
        out: dict[str, Staged] = {}
        stack = [""]
        while stack:
            rel = stack.pop()
            full = os.path.join(self.upper, rel) if rel else self.upper
            with os.scandir(full) as entries:
                found = sorted(entries, key=lambda e: e.name)
            for entry in found:
                child = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                self._read(child, entry.path, st, out, stack)
        return out

    def _read(
        self,
        rel: str,
        full: str,
        st: os.stat_result,
        out: dict[str, Staged],
        stack: list[str],
    ) -> None:
        mode = st.st_mode
        if stat.S_ISCHR(mode) and st.st_rdev == 0:  # a whiteout: os.makedev(0, 0)
            out[rel] = None
            return
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            # A fifo or a socket: nothing a workspace holds (a staged copy
            # skips them too), so what was there is gone.
            out[rel] = None
            return
        if not stat.S_ISLNK(mode):
            for name in _FOREIGN:
                if _xattr(full, name) is not None:
                    raise PathRefused(
                        Reason.BAD_CHANGE_SET, f"{rel}: the overlay marked it {name}, not staged"
                    )
        out[rel] = read_node(full, st)
        if not stat.S_ISDIR(mode):
            return
        stack.append(rel)
        live = os.path.join(self.live, rel)
        if _xattr(full, OPAQUE_XATTR) == b"y" and os.path.isdir(live) and not os.path.islink(live):
            # A directory made anew over the live one: what it does not list is gone.
            for name in os.listdir(live):
                if not os.path.lexists(os.path.join(full, name)):
                    out[f"{rel}/{name}"] = None

    def clear(self) -> None:
        clear_dir(self.stage)


__all__ = ["OverlayStage"]
