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

Sealed scopes (docs/adr/0060-seal17-sealed-skills.md): with a sealer,
every object of a ``session/`` or ``peer/`` scope is stored as a sealed
blob of its subject (content-addressed over the ciphertext, as the turns'
blobs), and its name in kernel state is a keyed id (``~`` and an HMAC of
the scope and name under a key derived from the subject's), so no state
key, effect description or snapshot names it; the name is in the sealed
commit. After the subject's forget its refs list as forgotten. ``global``
(the owner's own library) stays plaintext.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from naga import values
from naga.constants import SESSION_PATTERN
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import sealed_pb2 as slpb
from naga_core.errors import BlobError
from naga_core.kernel import Kernel, Scalar
from naga_core.ledger import BlobStore
from naga_core.skills._errors import (
    Reason,
    SkillError,
    SkillForgotten,
    SkillNotFound,
    SkillRefused,
)
from naga_core.skills._format import SkillDoc, check_files, check_name, check_path, parse
from naga_core.skills._objects import Commit, Tree, TreeEntry

REF_FAMILY = "skill.ref"
ARCHIVED_FAMILY = "skill.archived"
PINNED_FAMILY = "skill.pinned"
GLOBAL = "global"
_SESSION = re.compile(SESSION_PATTERN)
_PEER = re.compile(r"[a-z][a-z0-9_-]*:\S+")
_CACHE_MAX = 4096
#: What a forgotten skill's name says (the words of naga_core.memory's
#: FORGOTTEN: the same layer, so not imported; a test keeps them equal).
FORGOTTEN = "[forgotten: the key of its subject was destroyed]"
#: What a sealed skill that does not open says (memory's UNREADABLE).
UNREADABLE = "[unreadable: its sealed text does not open]"
#: The HKDF label of the key naming a subject's skills in kernel state.
NAME_KEY_LABEL = b"naga-skill-name v1"
#: What a keyed id starts with (a skill's name never does: check_name).
KEYED = "~"
_KEYED_HEX = 32


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


class Sealing(Protocol):
    """What the store needs of naga_core.memory.Sealer (a part of the same
    layer: given by the agent, never imported)."""

    @property
    def generation(self) -> int: ...

    def seal_blob(self, subject: str, data: bytes) -> bytes: ...

    def open_blob(self, data: bytes) -> bytes | None: ...

    def blob_subject(self, data: bytes) -> str | None: ...

    def derived_key(self, subject: str, label: bytes, *, create: bool) -> bytes | None: ...

    def key_id(self, subject: str) -> str | None: ...

    def seal_text(self, subject: str, text: str, *context: str) -> slpb.SealedBox: ...

    def open_text(self, box: slpb.SealedBox, *context: str) -> str: ...


def scope_subject(scope: str) -> str:
    """The subject whose key seals a scope written with no turn naming one
    (an owner's import): a peer's id, ``session:<id>``; "" for global."""
    kind, _, rest = scope.partition("/")
    if kind == "peer":
        return rest
    if kind == "session":
        return f"session:{rest}"
    return ""


def keyed_name(key: bytes, scope: str, name: str) -> str:
    """The keyed id of skill ``name`` of ``scope`` under a subject's name key."""
    mac = hmac.new(key, f"{scope}\0{name}".encode(), hashlib.sha256).hexdigest()
    return KEYED + mac[:_KEYED_HEX]


def _key(scope: str, name: str) -> str:
    return f"{scope}/{name}"


def _split(key: str) -> tuple[str, str]:
    scope, _, name = key.rpartition("/")  # a name has no '/'
    return scope, name


@dataclass(frozen=True, slots=True)
class SkillRef:
    """Where a skill's ref points now. ``key`` is its kernel state key
    (``<scope>/<name>``, or ``<scope>/~<keyed id>`` in a sealed scope), the
    identity usage counts and ``skill.turn`` records use; ``forgotten``: its
    sealed commit no longer opens (``name`` then says so, never '')."""

    scope: str
    name: str
    commit: bytes
    archived: bool
    pinned: bool
    key: str = ""
    forgotten: bool = False


@dataclass(frozen=True, slots=True)
class Version:
    """One immutable version: its commit's hash, the commit, its tree."""

    digest: bytes
    commit: Commit
    tree: Tree
    #: Whose key sealed it ('' for a plaintext version).
    subject: str = ""


class SkillStore:
    """The library over one kernel and blob store. Writes are kernel effects:
    in the core, call them inside ``Core.write``. With ``sealer`` (set by
    the agent: the memory store's), session and peer scopes are sealed."""

    def __init__(
        self,
        kernel: Kernel,
        blobs: BlobStore,
        *,
        clock: Callable[[], int] = time.time_ns,
        sealer: Sealing | None = None,
    ) -> None:
        self.kernel = kernel
        self.blobs = blobs
        self.sealer = sealer
        self._clock = clock
        self._versions: dict[bytes, Version] = {}
        self._docs: dict[bytes, SkillDoc] = {}
        self._refs: list[SkillRef] = []
        self._refs_epoch: tuple[int, ...] | None = None
        self._generation = 0

    # --- sealing --------------------------------------------------------------------

    def sealed(self, scope: str) -> bool:
        """Whether new skills of ``scope`` are sealed."""
        return self.sealer is not None and scope != GLOBAL

    def _fresh(self) -> None:
        """Drop what was opened before a forget: it may not open now."""
        generation = self.sealer.generation if self.sealer is not None else 0
        if generation != self._generation:
            self._versions.clear()
            self._docs.clear()
            self._refs_epoch = None
            self._generation = generation

    def _put(self, subject: str, data: bytes) -> bytes:
        if subject and self.sealer is not None:
            return self.blobs.put(self.sealer.seal_blob(subject, data))
        return self.blobs.put(data)

    def _get(self, digest: bytes) -> tuple[bytes, str]:
        """An object's canonical bytes and whose key sealed it ('' if none)."""
        raw = self.blobs.get(digest)
        sealer = self.sealer
        subject = sealer.blob_subject(raw) if sealer is not None else None
        if sealer is None or subject is None:
            return raw, ""
        opened = sealer.open_blob(raw)
        if opened is None:
            raise SkillForgotten(f"skill object {digest.hex()[:12]} no longer opens")
        return opened, subject

    def blob(self, digest: bytes) -> bytes:
        """A file's bytes by the digest its tree names (opened if sealed)."""
        return self._get(digest)[0]

    def _keyed(self, scope: str, name: str, subject: str) -> str:
        assert self.sealer is not None
        key = self.sealer.derived_key(subject, NAME_KEY_LABEL, create=True)
        if key is None:  # a key ring with no master cannot seal: never in a core
            raise SkillRefused(Reason.SCOPE_DENIED, f"no key to seal a skill of {scope}")
        return _key(scope, keyed_name(key, scope, name))

    # --- reading -------------------------------------------------------------------

    @property
    def epoch(self) -> tuple[int, ...]:
        """Moves with every change of a ref or an archive flag, and at a forget."""
        self._fresh()
        return (
            self.kernel.version(REF_FAMILY),
            self.kernel.version(ARCHIVED_FAMILY),
            self._generation,
        )

    def _all(self) -> list[SkillRef]:
        """Every ref, names opened (cached until a ref, flag or key moves)."""
        epoch = (*self.epoch, self.kernel.version(PINNED_FAMILY))
        if self._refs_epoch == epoch:
            return self._refs
        state = self.kernel.state
        out: list[SkillRef] = []
        for key, value in sorted(state.family(REF_FAMILY).items()):
            s, name = _split(key)
            assert isinstance(value, bytes)
            is_archived = state.get((ARCHIVED_FAMILY, key)) is True
            pinned = state.get((PINNED_FAMILY, key)) is True
            forgotten = False
            if name.startswith(KEYED):
                try:
                    commit = self.version(value).commit
                    name = commit.name if commit.scope == s else UNREADABLE
                    forgotten = commit.scope != s
                except SkillForgotten:
                    name, forgotten = FORGOTTEN, True
                except (SkillError, BlobError):
                    name, forgotten = UNREADABLE, True
            out.append(SkillRef(s, name, value, is_archived, pinned, key, forgotten))
        self._refs, self._refs_epoch = out, epoch
        return out

    def refs(self, scope: str | None = None, *, archived: bool = True) -> list[SkillRef]:
        """The refs (of ``scope``), forgotten ones included: a caller that
        reads their versions skips ``forgotten``."""
        return [
            r
            for r in self._all()
            if (scope is None or r.scope == scope) and (archived or not r.archived)
        ]

    def ref(self, scope: str, name: str) -> SkillRef | None:
        key = _key(check_scope(scope), check_name(name))
        state = self.kernel.state
        value = state.get((REF_FAMILY, key))
        if not isinstance(value, bytes):
            if scope == GLOBAL:
                return None
            # A sealed scope's refs are keyed ids: found by their opened names.
            return next(
                (r for r in self._all() if r.scope == scope and r.name == name and not r.forgotten),
                None,
            )
        return SkillRef(
            scope,
            name,
            value,
            state.get((ARCHIVED_FAMILY, key)) is True,
            state.get((PINNED_FAMILY, key)) is True,
            key,
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
        self._fresh()
        cached = self._versions.get(digest)
        if cached is not None:
            return cached
        raw, subject = self._get(digest)
        commit = Commit.decode(raw)
        found = Version(digest, commit, Tree.decode(self._get(commit.tree)[0]), subject)
        if len(self._versions) >= _CACHE_MAX:
            self._versions.clear()
        self._versions[digest] = found
        return found

    def files(self, version: Version) -> dict[str, bytes]:
        return {e.path: self.blob(e.blob) for e in version.tree.entries}

    def doc(self, version: Version) -> SkillDoc:
        """What a version's SKILL.md says (immutable, so cached by its blob)."""
        self._fresh()
        blob = version.tree.blob("SKILL.md")
        assert blob is not None
        cached = self._docs.get(blob)
        if cached is None:
            cached = parse(self.blob(blob))
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

    def same_files(
        self, version: Version, files: Mapping[str, bytes], executable: frozenset[str]
    ) -> bool:
        """Whether ``version`` holds exactly ``files`` (a sealed tree names
        ciphertexts, fresh at each seal: compared by what they open to)."""
        if {e.path for e in version.tree.entries} != set(files):
            return False
        if version.tree.executable != executable & set(files):
            return False
        return self.files(version) == dict(files)

    # --- writing (each one kernel effect) ----------------------------------------------

    def _tree(self, subject: str, files: Mapping[str, bytes], executable: frozenset[str]) -> bytes:
        """Store ``files`` and their tree; the tree's digest."""
        entries = tuple(
            TreeEntry(check_path(p), self._put(subject, files[p]), p in executable)
            for p in sorted(files)
        )
        return self._put(subject, Tree(entries).encode())

    def _commit(
        self,
        scope: str,
        name: str,
        tree_digest: bytes,
        parents: Sequence[bytes],
        *,
        subject: str,
        author: str,
        reason: str,
        action: str,
    ) -> bytes:
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
        return self._put(subject, commit.encode())

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

    def _said(self, scope: str, plain: str, sealed: str) -> str:
        """An effect's description: ``sealed`` (naming no skill, quoting no
        reason) for a sealed scope's change, else ``plain``."""
        return sealed if self.sealed(scope) else plain

    def create(
        self,
        scope: str,
        files: Mapping[str, bytes],
        executable: frozenset[str] = frozenset(),
        *,
        author: str,
        reason: str,
        subject: str = "",
    ) -> SkillRef:
        """A new skill; in a sealed scope sealed under ``subject`` (the
        writing turn's; default :func:`scope_subject`)."""
        check_scope(scope)
        self._check_writer(scope, author)
        doc = check_files(files)
        if self.ref(scope, doc.name) is not None:
            raise SkillRefused(
                Reason.CONFLICT,
                f"skill {doc.name} exists in {scope}: patch it (or restore it) instead",
            )
        who = (subject or scope_subject(scope)) if self.sealed(scope) else ""
        key = self._keyed(scope, doc.name, who) if who else _key(scope, doc.name)
        tree = self._tree(who, files, executable)
        digest = self._commit(
            scope, doc.name, tree, (), subject=who, author=author, reason=reason, action="create"
        )
        self._journal(
            [(REF_FAMILY, key, digest)],
            self._said(
                scope,
                f"skill {doc.name} created in {scope} by the {author}: {reason}",
                f"a sealed skill created in {scope} by the {author}",
            ),
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
        current = self.version(head.commit)
        if self.same_files(current, files, executable):
            raise SkillRefused(Reason.UNCHANGED, f"the patch leaves skill {name} as it is")
        # A skill keeps its form: a sealed head's versions are sealed under its subject.
        tree = self._tree(current.subject, files, executable)
        digest = self._commit(
            scope,
            name,
            tree,
            (head.commit,),
            subject=current.subject,
            author=author,
            reason=reason,
            action="patch",
        )
        self._journal(
            [(REF_FAMILY, head.key, digest)],
            self._said(
                scope,
                f"skill {name} in {scope} patched by the {author}: {reason}",
                f"a sealed skill in {scope} patched by the {author}",
            ),
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
            [(family, ref.key, True if on else None)],
            self._said(
                scope,
                f"skill {name} in {scope} {what} by the {by}: {reason}",
                f"a sealed skill in {scope} {what} by the {by}",
            ),
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
        current = self.version(head.commit)
        to_hex = target.digest.hex()[:12]
        if target.commit.tree == current.commit.tree or self.same_files(
            current, self.files(target), target.tree.executable
        ):
            raise SkillRefused(Reason.UNCHANGED, f"skill {name} already has {to}'s files")
        digest = self._commit(
            scope,
            name,
            target.commit.tree,
            (head.commit,),
            subject=current.subject,
            author=author,
            reason=reason or f"revert to {target.digest.hex()[:12]}",
            action="revert",
        )
        self._journal(
            [(REF_FAMILY, head.key, digest)],
            self._said(
                scope,
                f"skill {name} in {scope} reverted to {to_hex} by the {author}",
                f"a sealed skill in {scope} reverted to {to_hex} by the {author}",
            ),
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
                ops.append((ARCHIVED_FAMILY, src.key, True))
        subject = self.version(head.commit).subject
        tree = self._tree(subject, files, executable)
        digest = self._commit(
            scope, name, tree, heads, subject=subject, author=author, reason=reason, action="merge"
        )
        merged = ", ".join(f"{s}/{n}" for s, n in sources)
        self._journal(
            [(REF_FAMILY, head.key, digest), *ops],
            self._said(
                scope,
                f"skills {merged} merged into {name} in {scope} by the {author}: {reason}",
                f"{len(sources)} sealed skills merged into one in {scope} by the {author}",
            ),
        )
        return self.need(scope, name)


__all__ = [
    "ARCHIVED_FAMILY",
    "FORGOTTEN",
    "GLOBAL",
    "KEYED",
    "NAME_KEY_LABEL",
    "PINNED_FAMILY",
    "REF_FAMILY",
    "Sealing",
    "SkillRef",
    "SkillStore",
    "Version",
    "check_scope",
    "keyed_name",
    "peer_scope",
    "scope_subject",
    "session_scope",
]
