"""The skill library: versions in the blob store, refs in kernel state.

A skill's versions are immutable objects (naga_core.skills._objects). What
moves is a *ref*: kernel state ``skill.ref/<scope>/<name>`` naming the
skill's current commit, with ``skill.archived`` and ``skill.pinned`` beside
it. Every change (create, patch, archive, restore, merge, revert, pin) is
one kernel ``perform`` effect carrying only state ops: its objects are
durable in the blob store before it is journaled, and a rollback moves the
refs back while every object stays, so a version written and rolled away
is still readable by its hash.

Scopes: ``global``, ``session/<id>``, ``peer/<peer id>``. Skills the agent
writes land in its session's or its peer's scope, never in global
(promotion comes with shadow verification, SPEC L3).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from naga import values
from naga.constants import SESSION_PATTERN
from naga.v1 import kernel_pb2 as kpb
from naga_core.kernel import Kernel, Scalar
from naga_core.ledger import BlobStore
from naga_core.skills._errors import Reason, SkillNotFound, SkillRefused
from naga_core.skills._format import SkillDoc, check_files, check_name, parse
from naga_core.skills._objects import Commit, Tree, digest_of

REF_FAMILY = "skill.ref"
ARCHIVED_FAMILY = "skill.archived"
PINNED_FAMILY = "skill.pinned"
GLOBAL = "global"
_SESSION = re.compile(SESSION_PATTERN)
_PEER = re.compile(r"[a-z][a-z0-9_-]*:\S+")
_CACHE_MAX = 4096


def session_scope(session: str) -> str:
    return check_scope(f"session/{session}")


def peer_scope(peer: str) -> str:
    return check_scope(f"peer/{peer}")


def check_scope(scope: str) -> str:
    kind, _, rest = scope.partition("/")
    ok = (
        (scope == GLOBAL)
        or (kind == "session" and _SESSION.fullmatch(rest) is not None)
        or (kind == "peer" and len(rest) <= 256 and _PEER.fullmatch(rest) is not None)
    )
    if not ok:
        raise SkillRefused(
            Reason.BAD_SCOPE,
            f"scope {scope[:80]!r} is not global, session/<id> or peer/<channel>:<id>",
        )
    return scope


def _key(scope: str, name: str) -> str:
    return f"{scope}/{name}"


def _split(key: str) -> tuple[str, str]:
    scope, _, name = key.rpartition("/")  # a name has no '/'
    return scope, name


@dataclass(frozen=True, slots=True)
class SkillRef:
    """Where a skill's ref points now."""

    scope: str
    name: str
    commit: bytes
    archived: bool
    pinned: bool


@dataclass(frozen=True, slots=True)
class Version:
    """One immutable version: its commit's hash, the commit, its tree."""

    digest: bytes
    commit: Commit
    tree: Tree


class SkillStore:
    """The library over one kernel and blob store. Writes are kernel effects:
    in the core, call them inside ``Core.write``."""

    def __init__(
        self, kernel: Kernel, blobs: BlobStore, *, clock: Callable[[], int] = time.time_ns
    ) -> None:
        self.kernel = kernel
        self.blobs = blobs
        self._clock = clock
        self._versions: dict[bytes, Version] = {}
        self._docs: dict[bytes, SkillDoc] = {}

    # --- reading -------------------------------------------------------------------

    @property
    def epoch(self) -> tuple[int, int]:
        """Moves with every change of a ref or an archive flag."""
        return self.kernel.version(REF_FAMILY), self.kernel.version(ARCHIVED_FAMILY)

    def refs(self, scope: str | None = None, *, archived: bool = True) -> list[SkillRef]:
        state = self.kernel.state
        out: list[SkillRef] = []
        for key, value in sorted(state.family(REF_FAMILY).items()):
            s, name = _split(key)
            if scope is not None and s != scope:
                continue
            is_archived = state.get((ARCHIVED_FAMILY, key)) is True
            if is_archived and not archived:
                continue
            assert isinstance(value, bytes)
            pinned = state.get((PINNED_FAMILY, key)) is True
            out.append(SkillRef(s, name, value, is_archived, pinned))
        return out

    def ref(self, scope: str, name: str) -> SkillRef | None:
        key = _key(check_scope(scope), check_name(name))
        state = self.kernel.state
        value = state.get((REF_FAMILY, key))
        if not isinstance(value, bytes):
            return None
        return SkillRef(
            scope,
            name,
            value,
            state.get((ARCHIVED_FAMILY, key)) is True,
            state.get((PINNED_FAMILY, key)) is True,
        )

    def need(self, scope: str, name: str) -> SkillRef:
        found = self.ref(scope, name)
        if found is None:
            raise SkillNotFound(f"no skill {name!r} in scope {scope}")
        return found

    def find(self, name: str, scopes: Sequence[str]) -> SkillRef:
        """The skill ``name`` in the first of ``scopes`` that has it."""
        for scope in scopes:
            found = self.ref(scope, name)
            if found is not None:
                return found
        raise SkillNotFound(f"no skill {name!r} in {', '.join(scopes) or 'no scope'}")

    def version(self, digest: bytes) -> Version:
        cached = self._versions.get(digest)
        if cached is not None:
            return cached
        commit = Commit.decode(self.blobs.get(digest))
        found = Version(digest, commit, Tree.decode(self.blobs.get(commit.tree)))
        if len(self._versions) >= _CACHE_MAX:
            self._versions.clear()
        self._versions[digest] = found
        return found

    def files(self, version: Version) -> dict[str, bytes]:
        return {e.path: self.blobs.get(e.blob) for e in version.tree.entries}

    def doc(self, version: Version) -> SkillDoc:
        """What a version's SKILL.md says (immutable, so cached by its blob)."""
        blob = version.tree.blob("SKILL.md")
        assert blob is not None
        cached = self._docs.get(blob)
        if cached is None:
            cached = parse(self.blobs.get(blob))
            if len(self._docs) >= _CACHE_MAX:
                self._docs.clear()
            self._docs[blob] = cached
        return cached

    def log(self, scope: str, name: str) -> list[Version]:
        """Every version reachable from the skill's ref, newest first."""
        return self.ancestry(self.need(scope, name).commit)

    def ancestry(self, head: bytes) -> list[Version]:
        seen: dict[bytes, Version] = {}
        todo = [head]
        while todo:
            digest = todo.pop()
            if digest in seen:
                continue
            v = self.version(digest)
            seen[digest] = v
            todo.extend(v.commit.parents)
        return sorted(seen.values(), key=lambda v: (v.commit.time_ns, v.digest), reverse=True)

    def resolve(self, scope: str, name: str, prefix: str) -> Version:
        """A version of the skill by its hash or a unique prefix of it (4+ hex)."""
        want = prefix.lower()
        if len(want) < 4 or any(c not in "0123456789abcdef" for c in want):
            raise SkillRefused(Reason.BAD_FORMAT, f"{prefix[:80]!r} is not a version hash (hex)")
        hits = [v for v in self.log(scope, name) if v.digest.hex().startswith(want)]
        if not hits:
            raise SkillNotFound(f"skill {name} has no version {prefix}")
        if len(hits) > 1:
            raise SkillRefused(Reason.CONFLICT, f"{prefix} names {len(hits)} versions: give more")
        return hits[0]

    # --- writing (each one kernel effect) ----------------------------------------------

    def _commit(
        self,
        scope: str,
        name: str,
        tree: Tree,
        datas: Iterable[bytes],
        parents: Sequence[bytes],
        *,
        author: str,
        reason: str,
        action: str,
    ) -> bytes:
        for data in datas:
            self.blobs.put(data)
        tree_digest = self.blobs.put(tree.encode())
        commit = Commit.make(
            tree=tree_digest,
            parents=parents,
            author=author,
            reason=reason,
            scope=scope,
            name=name,
            action=action,
            time_ns=self._clock(),
        )
        return self.blobs.put(commit.encode())

    def _journal(self, ops: Sequence[tuple[str, str, Scalar | None]], description: str) -> int:
        forward: list[kpb.SetOp] = []
        for family, key, value in ops:
            op = kpb.SetOp(family=family, key=key)
            if value is not None:
                op.value.CopyFrom(values.to_value(value))
            forward.append(op)
        return self.kernel.perform([], [], description=description[:1000], forward=forward)

    @staticmethod
    def _check_writer(scope: str, author: str) -> None:
        if author == "agent" and scope == GLOBAL:
            raise SkillRefused(
                Reason.SCOPE_DENIED,
                "the agent writes skills into its session's or peer's scope, never global",
            )

    def create(
        self,
        scope: str,
        files: Mapping[str, bytes],
        executable: frozenset[str] = frozenset(),
        *,
        author: str,
        reason: str,
    ) -> SkillRef:
        check_scope(scope)
        self._check_writer(scope, author)
        doc = check_files(files)
        if self.ref(scope, doc.name) is not None:
            raise SkillRefused(
                Reason.CONFLICT,
                f"skill {doc.name} exists in {scope}: patch it (or restore it) instead",
            )
        tree = Tree.of(files, executable)
        digest = self._commit(
            scope, doc.name, tree, files.values(), (), author=author, reason=reason, action="create"
        )
        self._journal(
            [(REF_FAMILY, _key(scope, doc.name), digest)],
            f"skill {doc.name} created in {scope} by the {author}: {reason}",
        )
        return self.need(scope, doc.name)

    def patch(
        self,
        scope: str,
        name: str,
        files: Mapping[str, bytes],
        executable: frozenset[str] = frozenset(),
        *,
        author: str,
        reason: str,
    ) -> SkillRef:
        self._check_writer(scope, author)
        head = self.need(scope, name)
        if head.archived:
            raise SkillRefused(Reason.CONFLICT, f"skill {name} in {scope} is archived: restore it")
        doc = check_files(files)
        if doc.name != name:
            raise SkillRefused(
                Reason.CONFLICT, f"a patch of {name} may not rename it (SKILL.md says {doc.name})"
            )
        tree = Tree.of(files, executable)
        if digest_of(tree.encode()) == self.version(head.commit).commit.tree:
            raise SkillRefused(Reason.UNCHANGED, f"the patch leaves skill {name} as it is")
        digest = self._commit(
            scope,
            name,
            tree,
            files.values(),
            (head.commit,),
            author=author,
            reason=reason,
            action="patch",
        )
        self._journal(
            [(REF_FAMILY, _key(scope, name), digest)],
            f"skill {name} in {scope} patched by the {author}: {reason}",
        )
        return self.need(scope, name)

    def _flag(
        self, family: str, scope: str, name: str, on: bool, what: str, *, by: str, reason: str
    ) -> int:
        ref = self.need(scope, name)
        now = ref.archived if family == ARCHIVED_FAMILY else ref.pinned
        if now == on:
            raise SkillRefused(Reason.UNCHANGED, f"skill {name} in {scope} is {what} already")
        return self._journal(
            [(family, _key(scope, name), True if on else None)],
            f"skill {name} in {scope} {what} by the {by}: {reason}",
        )

    def archive(self, scope: str, name: str, *, author: str, reason: str) -> int:
        """Archived skills are kept (never deleted) and no longer offered."""
        return self._flag(ARCHIVED_FAMILY, scope, name, True, "archived", by=author, reason=reason)

    def restore(self, scope: str, name: str, *, author: str, reason: str) -> int:
        return self._flag(ARCHIVED_FAMILY, scope, name, False, "restored", by=author, reason=reason)

    def pin(self, scope: str, name: str, pinned: bool, *, author: str, reason: str) -> int:
        """A pinned skill is exempt from the curator."""
        what = "pinned" if pinned else "unpinned"
        return self._flag(PINNED_FAMILY, scope, name, pinned, what, by=author, reason=reason)

    def revert(self, scope: str, name: str, to: str, *, author: str, reason: str) -> SkillRef:
        """A new version with the files of the earlier version ``to``."""
        self._check_writer(scope, author)
        head = self.need(scope, name)
        target = self.resolve(scope, name, to)
        if target.commit.tree == self.version(head.commit).commit.tree:
            raise SkillRefused(Reason.UNCHANGED, f"skill {name} already has {to}'s files")
        digest = self._commit(
            scope,
            name,
            target.tree,
            (),
            (head.commit,),
            author=author,
            reason=reason or f"revert to {target.digest.hex()[:12]}",
            action="revert",
        )
        self._journal(
            [(REF_FAMILY, _key(scope, name), digest)],
            f"skill {name} in {scope} reverted to {target.digest.hex()[:12]} by the {author}",
        )
        return self.need(scope, name)

    def merge(
        self,
        scope: str,
        name: str,
        sources: Sequence[tuple[str, str]],
        files: Mapping[str, bytes],
        executable: frozenset[str] = frozenset(),
        *,
        author: str,
        reason: str,
    ) -> SkillRef:
        """One new version of ``name`` whose parents are its head and every
        source's; the sources are archived (kept in the tree), in one effect."""
        self._check_writer(scope, author)
        head = self.need(scope, name)
        doc = check_files(files)
        if doc.name != name:
            raise SkillRefused(Reason.CONFLICT, f"a merge into {name} must keep its name")
        heads = [head.commit]
        ops: list[tuple[str, str, Scalar | None]] = []
        for s, n in sources:
            if (s, n) == (scope, name):
                raise SkillRefused(Reason.CONFLICT, f"skill {name} cannot merge into itself")
            src = self.need(s, n)
            heads.append(src.commit)
            if not src.archived:
                ops.append((ARCHIVED_FAMILY, _key(s, n), True))
        tree = Tree.of(files, executable)
        digest = self._commit(
            scope, name, tree, files.values(), heads, author=author, reason=reason, action="merge"
        )
        merged = ", ".join(f"{s}/{n}" for s, n in sources)
        self._journal(
            [(REF_FAMILY, _key(scope, name), digest), *ops],
            f"skills {merged} merged into {name} in {scope} by the {author}: {reason}",
        )
        return self.need(scope, name)


__all__ = [
    "ARCHIVED_FAMILY",
    "GLOBAL",
    "PINNED_FAMILY",
    "REF_FAMILY",
    "SkillRef",
    "SkillStore",
    "Version",
    "check_scope",
    "peer_scope",
    "session_scope",
]
