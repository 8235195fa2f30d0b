"""A viewed skill version's files on disk, read-only, so that its scripts
can run through ``shell.run`` (docs/design/skills.md, "Scripts").

Each version is written once under ``<root>/<commit hex>`` (immutable, as
the version is) and made read-only; the shell's sandbox of a turn mounts
only the versions that turn viewed, read-only as well. The folder is a
cache of what the blob store holds: the core clears it at start.

A sealed version's files (a session's or a peer's skill) are plaintext
once written, so never under ``$NAGA_HOME``: they go under a private
folder on a memory-backed file system outside it (:func:`sealed_root`),
which the core clears at start and at stop, and the library clears of a
subject's versions at its forget (docs/adr/0060-seal17-sealed-skills.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile

from naga_core.skills._format import SKILL_FILE, write_dir
from naga_core.skills._store import SkillStore, Version

_SHM = "/dev/shm"


def sealed_root(home_root: str) -> str:
    """Where this home's sealed versions' files go: a folder per home and
    user under ``$XDG_RUNTIME_DIR`` (the user's own tmpfs) if it is one,
    else under /dev/shm; never on a disk."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if not (base and os.path.isabs(base) and _private_dir(base)):
        base = _SHM
    tag = hashlib.sha256(os.path.realpath(home_root).encode()).hexdigest()[:16]
    return os.path.join(base, f"naga-skills-{os.geteuid()}-{tag}")


def _private_dir(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _own_root(root: str) -> None:
    """Make ``root`` (0700) or accept it if it is ours alone: a shared
    parent (/dev/shm) lets anyone make a folder of that name first."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o700)
    if not _private_dir(root):
        raise OSError(f"{root} is not a private folder of this user: not writing into it")


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
    os.makedirs(os.path.dirname(root), mode=0o700, exist_ok=True)
    _own_root(root)
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
    """Remove ``root`` and every version under it (their folders are read-only);
    a link or a folder of another user is left alone (not ours to remove)."""
    if not os.path.lexists(root) or os.path.islink(root):
        return
    if os.lstat(root).st_uid != os.geteuid():
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


__all__ = ["clear", "folder_of", "has_files", "materialize", "sealed_root"]
