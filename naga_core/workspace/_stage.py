"""A staged copy of the workspace for one shell command, and its difference.

:meth:`Stage.prepare` copies the live tree into the stage (symlinks as
links, modes and times kept) and notes each copied path's inode and ctime.
After the command :meth:`Stage.staged` walks the stage: a path whose inode
and ctime are the ones noted was not touched (a process can set a file's
mtime but never its ctime), anything else is read and compared with the live
tree, and a noted path that is gone is a removal. So the cost after the
command is one walk plus reading what the command touched (ADR 0015).
"""

from __future__ import annotations

import os
import shutil
import stat

from naga_core.workspace._changes import Staged
from naga_core.workspace._tree import read_node, walk


class Stage:
    def __init__(self, live: str, stage: str) -> None:
        self.live = live
        self.stage = stage
        self._noted: dict[str, tuple[int, int]] = {}

    def prepare(self) -> None:
        if os.path.lexists(self.stage):
            clear_dir(self.stage)
        shutil.copytree(self.live, self.stage, symlinks=True, dirs_exist_ok=True)
        self._noted = {rel: (st.st_ino, st.st_ctime_ns) for rel, st in walk(self.stage)}

    def staged(self) -> dict[str, Staged]:
        """What the command changed, as staged writes over the live tree."""
        out: dict[str, Staged] = {}
        seen: set[str] = set()
        for rel, st in walk(self.stage):
            seen.add(rel)
            noted = self._noted.get(rel)
            if noted == (st.st_ino, st.st_ctime_ns):
                continue
            if noted is not None and stat.S_ISDIR(st.st_mode):
                live = os.path.join(self.live, rel)
                if os.path.isdir(live) and not os.path.islink(live):
                    continue  # only its entries changed; they are listed themselves
            out[rel] = read_node(os.path.join(self.stage, rel), st)
        for rel in self._noted:
            if rel not in seen:
                out[rel] = None
        return out

    def clear(self) -> None:
        clear_dir(self.stage)


def clear_dir(path: str) -> None:
    """Empty ``path`` (a directory kept), even where a command took away
    its own write permission."""
    for rel, st in reversed(walk(path)):
        full = os.path.join(path, rel)
        if stat.S_ISDIR(st.st_mode):
            os.chmod(full, 0o700)
    with os.scandir(path) as entries:
        for entry in list(entries):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


__all__ = ["Stage", "clear_dir"]
