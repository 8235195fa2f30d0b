"""What a workspace holds, path by path, without following a symlink.

A :class:`Node` is what one path is: a file (its bytes' SHA-256 and whether
any execute bit is set), a directory, or a symlink (its target as written).
Modes other than the execute bit, owners and times are not part of it: they
are not what a rollback promises to restore (docs/design/tools.md).
"""

from __future__ import annotations

import enum
import hashlib
import os
import stat
from dataclasses import dataclass

from naga_core.workspace._errors import PathRefused, Reason

#: Longest relative path the workspace takes, in characters.
MAX_PATH = 1024


class Kind(enum.Enum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"


@dataclass(frozen=True, slots=True)
class Node:
    kind: Kind
    #: FILE: SHA-256 of the bytes.
    digest: bytes = b""
    #: SYMLINK: the target as written.
    target: str = ""
    executable: bool = False

    @classmethod
    def file(cls, data: bytes, *, executable: bool = False) -> Node:
        return cls(Kind.FILE, hashlib.sha256(data).digest(), executable=executable)

    @classmethod
    def directory(cls) -> Node:
        return cls(Kind.DIRECTORY)

    @classmethod
    def symlink(cls, target: str) -> Node:
        return cls(Kind.SYMLINK, target=target)


#: Path (relative, '/'-separated) to what is there.
Tree = dict[str, Node]


def check_path(path: str) -> str:
    """``path`` normalized, if it names something inside the workspace."""
    if not path or "\0" in path or len(path) > MAX_PATH:
        raise PathRefused(Reason.BAD_PATH, f"path {path!r} is empty, too long or holds NUL")
    if path.startswith("/"):
        raise PathRefused(
            Reason.BAD_PATH, f"path {path!r} is absolute; give it relative to the workspace"
        )
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise PathRefused(Reason.BAD_PATH, f"path {path!r} leaves the workspace (or names it)")
    return "/".join(parts)


def parents_are_directories(root: str, path: str) -> None:
    """Refuse ``path`` when one of its parents is a symlink or not a directory."""
    parts = path.split("/")[:-1]
    at = root
    for i, part in enumerate(parts):
        at = os.path.join(at, part)
        try:
            st = os.lstat(at)
        except FileNotFoundError:
            return  # made on the way
        if stat.S_ISLNK(st.st_mode):
            raise PathRefused(
                Reason.THROUGH_LINK,
                f"{'/'.join(parts[: i + 1])} is a symlink: {path} would be outside the workspace",
            )
        if not stat.S_ISDIR(st.st_mode):
            raise PathRefused(
                Reason.WRONG_KIND, f"{'/'.join(parts[: i + 1])} is a file, not a directory"
            )


def read_node(full: str, st: os.stat_result) -> tuple[Node, bytes | None]:
    """The node at ``full`` (stat ``st``, not followed), and a file's bytes."""
    if stat.S_ISLNK(st.st_mode):
        return Node.symlink(os.readlink(full)), None
    if stat.S_ISDIR(st.st_mode):
        return Node.directory(), None
    if stat.S_ISREG(st.st_mode):
        with open(full, "rb") as f:
            data = f.read()
        return Node.file(data, executable=bool(st.st_mode & 0o111)), data
    raise PathRefused(Reason.WRONG_KIND, f"{full} is neither a file, a directory nor a symlink")


def walk(root: str, under: str = "") -> list[tuple[str, os.stat_result]]:
    """Every path under ``root``/``under`` (itself included when given), parents
    first, with its lstat; fifos, sockets and devices are skipped."""
    out: list[tuple[str, os.stat_result]] = []
    start = os.path.join(root, under) if under else root
    if under:
        try:
            out.append((under, os.lstat(start)))
        except FileNotFoundError:
            return out
        if not stat.S_ISDIR(out[0][1].st_mode):
            return out
    stack = [(under, start)]
    while stack:
        rel, full = stack.pop()
        with os.scandir(full) as entries:
            found = sorted(entries, key=lambda e: e.name)
        for entry in found:
            child = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            if not (
                stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)
            ):
                continue
            out.append((child, st))
            if stat.S_ISDIR(st.st_mode):
                stack.append((child, entry.path))
    return out


def scan(root: str, under: str = "") -> Tree:
    """The tree under ``root`` (or one subtree of it), every file hashed."""
    tree: Tree = {}
    for rel, st in walk(root, under):
        tree[rel] = read_node(os.path.join(root, rel), st)[0]
    return tree


def tree_hash(root: str) -> str:
    """One SHA-256 over every path and what it is: equal trees, equal hashes."""
    h = hashlib.sha256()
    for rel, node in sorted(scan(root).items()):
        h.update(rel.encode() + b"\0" + node.kind.value.encode() + b"\0")
        h.update(node.digest + node.target.encode() + (b"\1" if node.executable else b"\0"))
        h.update(b"\n")
    return h.hexdigest()


__all__ = [
    "MAX_PATH",
    "Kind",
    "Node",
    "Tree",
    "check_path",
    "parents_are_directories",
    "read_node",
    "scan",
    "tree_hash",
    "walk",
]
