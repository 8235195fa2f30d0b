"""The skill library's objects: blobs (a file's bytes), trees (a version's
files) and commits (a tree, its parents, who wrote it and why), each
stored in the core's content-addressed blob store under the SHA-256 of its
bytes. An object is never rewritten: a change is a new commit, so every
version stays addressable by its hash, and that hash can be recomputed
from the bytes alone by anyone.

Encodings are canonical (one byte string per value): a tree is a header
line and one ``<mode> <hex> <path>`` line per file, sorted by path; a
commit is a header line and a JSON object with sorted keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from naga_core.skills._errors import Reason, SkillError, SkillRefused
from naga_core.skills._format import check_path

TREE_HEADER = b"naga.skill.tree/1\n"
COMMIT_HEADER = b"naga.skill.commit/1\n"
AUTHORS = ("agent", "owner", "curator")
MAX_REASON_CHARS = 2000


def digest_of(raw: bytes) -> bytes:
    return hashlib.sha256(raw).digest()


@dataclass(frozen=True, slots=True, order=True)
class TreeEntry:
    path: str
    blob: bytes
    executable: bool = False


@dataclass(frozen=True, slots=True)
class Tree:
    entries: tuple[TreeEntry, ...]

    @classmethod
    def of(cls, files: Mapping[str, bytes], executable: frozenset[str] = frozenset()) -> Tree:
        return cls(
            tuple(
                TreeEntry(check_path(p), digest_of(files[p]), p in executable)
                for p in sorted(files)
            )
        )

    def encode(self) -> bytes:
        lines = [
            f"{'100755' if e.executable else '100644'} {e.blob.hex()} {e.path}\n".encode()
            for e in sorted(self.entries)
        ]
        return TREE_HEADER + b"".join(lines)

    @classmethod
    def decode(cls, raw: bytes) -> Tree:
        if not raw.startswith(TREE_HEADER):
            raise SkillError("not a skill tree object")
        entries: list[TreeEntry] = []
        for line in raw[len(TREE_HEADER) :].decode().splitlines():
            mode, hexd, path = line.split(" ", 2)
            entries.append(TreeEntry(path, bytes.fromhex(hexd), mode == "100755"))
        return cls(tuple(entries))

    @property
    def executable(self) -> frozenset[str]:
        return frozenset(e.path for e in self.entries if e.executable)

    def blob(self, path: str) -> bytes | None:
        return next((e.blob for e in self.entries if e.path == path), None)


@dataclass(frozen=True, slots=True)
class Commit:
    tree: bytes
    parents: tuple[bytes, ...]
    author: str
    reason: str
    scope: str
    name: str
    action: str
    time_ns: int

    @classmethod
    def make(
        cls,
        *,
        tree: bytes,
        parents: Sequence[bytes],
        author: str,
        reason: str,
        scope: str,
        name: str,
        action: str,
        time_ns: int,
    ) -> Commit:
        if author not in AUTHORS:
            raise SkillRefused(
                Reason.BAD_FORMAT, f"author must be one of {AUTHORS}, not {author!r}"
            )
        if len(reason) > MAX_REASON_CHARS:
            raise SkillRefused(
                Reason.TOO_LARGE, f"a reason has at most {MAX_REASON_CHARS} characters"
            )
        return cls(tree, tuple(parents), author, reason, scope, name, action, time_ns)

    def encode(self) -> bytes:
        body = {
            "action": self.action,
            "author": self.author,
            "name": self.name,
            "parents": [p.hex() for p in self.parents],
            "reason": self.reason,
            "scope": self.scope,
            "time_ns": self.time_ns,
            "tree": self.tree.hex(),
        }
        return (
            COMMIT_HEADER
            + json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        )

    @classmethod
    def decode(cls, raw: bytes) -> Commit:
        if not raw.startswith(COMMIT_HEADER):
            raise SkillError("not a skill commit object")
        try:
            body = cast("dict[str, object]", json.loads(raw[len(COMMIT_HEADER) :]))
            parents = cast("list[str]", body["parents"])
            return cls(
                tree=bytes.fromhex(str(body["tree"])),
                parents=tuple(bytes.fromhex(p) for p in parents),
                author=str(body["author"]),
                reason=str(body["reason"]),
                scope=str(body["scope"]),
                name=str(body["name"]),
                action=str(body["action"]),
                time_ns=int(cast("int", body["time_ns"])),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SkillError(f"a skill commit object does not decode: {exc}") from None


__all__ = ["AUTHORS", "Commit", "Tree", "TreeEntry", "digest_of"]
