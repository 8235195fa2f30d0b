"""A viewed skill version's files on disk, read-only, so that its scripts
can run through ``shell.run`` (docs/design/skills.md, "Scripts").

Each version is written once under ``<root>/<commit hex>`` (immutable, as
the version is) and made read-only; the shell's sandbox of a turn mounts
only the versions that turn viewed, read-only as well. The folder is a
cache of what the blob store holds: the core clears it at start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile

from naga_core.skills._format import SKILL_FILE, write_dir
from naga_core.skills._store import SkillStore, Version


def has_files(version: Version) -> bool:
    """Whether the version has more than its SKILL.md (scripts, references, assets)."""
    return any(e.path != SKILL_FILE for e in version.tree.entries)


def folder_of(version: Version, root: str) -> str:
    """Where ``version``'s files are (or go) under ``root``."""
    return os.path.join(root, version.digest.hex())


def materialize(store: SkillStore, version: Version, root: str) -> str:
    """The folder holding ``version``'s files, written if missing (blocking:
    the core calls it on a worker thread)."""
    dest = folder_of(version, root)
    if os.path.isdir(dest):
        return dest
    os.makedirs(root, mode=0o700, exist_ok=True)
    # Written aside and renamed into place: a reader never sees half a
    # version, and a crash leaves only a dot-folder the next start clears.
    tmp = tempfile.mkdtemp(prefix=".part-", dir=root)
    try:
        write_dir(tmp, store.files(version), version.tree.executable)
        _seal(tmp)
        os.rename(tmp, dest)
    except OSError:
        if not os.path.isdir(dest):
            raise
        # Another view of the same version won the rename: theirs is the same bytes.
    finally:
        if os.path.exists(tmp):
            clear(tmp)
    return dest


def clear(root: str) -> None:
    """Remove ``root`` and every version under it (their folders are read-only)."""
    if not os.path.lexists(root):
        return
    for top, dirs, _files in os.walk(root):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(top, name), 0o700)
    with contextlib.suppress(OSError):
        os.chmod(root, 0o700)
    shutil.rmtree(root)


def _seal(path: str) -> None:
    for top, dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(top, name)
            run = os.stat(full).st_mode & stat.S_IXUSR
            os.chmod(full, 0o555 if run else 0o444)
        for name in dirs:
            os.chmod(os.path.join(top, name), 0o555)
    os.chmod(path, 0o555)


__all__ = ["clear", "folder_of", "has_files", "materialize"]
