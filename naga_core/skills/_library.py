"""The library in use: which skills a turn is offered, what ``skill.view``
shows, the per-turn record of offers, views and follows, and usage.

Progressive disclosure: a turn's system prompt carries only the names and
descriptions of the few skills most relevant to its message (BM25 over
name, description and body, in memory, rebuilt when a ref moves), within a
token cap; a body is loaded only when the model asks (``skill.view``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import trio
from google.protobuf.message import DecodeError

from naga.v1 import model_pb2 as mpb
from naga.v1 import skills_pb2 as skpb
from naga.v1 import startparts_pb2 as sppb
from naga_core.errors import BlobError
from naga_core.ledger import Entry, Ledger, Record
from naga_core.skills._errors import SkillError
from naga_core.skills._files import clear, folder_of, has_files, materialize
from naga_core.skills._format import SKILL_FILE, SkillDoc
from naga_core.skills._sediment import scopes_for
from naga_core.skills._store import Sealing, SkillRef, SkillStore, Version
from naga_core.skills._text import Bm25, weighted

log = logging.getLogger("naga.skills")

#: The ledger record of one turn's use of skills.
TURN_KIND = "skill.turn"
VIEW_TOOL = "skill.view"
VIEW_SPEC = mpb.ToolSpec(
    name="skill__view",
    description=(
        "Load a skill named in the system prompt: its instructions (SKILL.md), or one of "
        "its files (path, e.g. scripts/run.sh). Load a skill before acting on it."
    ),
    parameters_json_schema=json.dumps(
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "the skill's name"},
                "path": {"type": "string", "description": "a file of the skill (optional)"},
            },
            "required": ["name"],
        },
        separators=(",", ":"),
    ),
)
#: Least BM25 score of a skill offered: one rare shared word, not a stop word.
MIN_SCORE = 1.0
_VIEW_CHARS = 16_000
_BYTES_PER_TOKEN = 3


@dataclass(frozen=True, slots=True)
class Offered:
    scope: str
    name: str
    description: str
    score: float
    #: Its ref's kernel key (a keyed id in a sealed scope): what the
    #: ``skill.turn`` record names.
    key: str = ""


@dataclass(frozen=True, slots=True)
class Offer:
    skills: tuple[Offered, ...]

    def section(self) -> str:
        """The system prompt's section naming the offered skills ('' for none)."""
        if not self.skills:
            return ""
        lines = "".join(f"- {s.name}: {s.description}\n" for s in self.skills)
        return (
            "\n\nSkills that may apply (call skill__view with the name to load one before "
            f"you follow it):\n{lines}"
        )


@dataclass(frozen=True, slots=True)
class Viewed:
    """A ``skill.view`` answer: the result JSON (or the error), the
    scope/name viewed, and the folder of its files ('' if none written)."""

    ok: bool
    text: str
    key: str = ""
    folder: str = ""

    @classmethod
    def failed(cls, error: str) -> Viewed:
        return cls(False, error)


@dataclass(slots=True)
class _Index:
    epoch: tuple[int, ...]
    refs: list[tuple[SkillRef, SkillDoc]]
    bm25: Bm25


@dataclass(slots=True)
class Usage:
    """Views per skill (its ref's key: ``scope/name``, or a sealed scope's
    ``scope/~<keyed id>``, never a sealed name) and the last one's time, from the
    ``skill.turn`` records; and the counts ``naga skill stats`` shows."""

    uses: dict[str, tuple[int, int]] = field(default_factory=dict[str, tuple[int, int]])
    counts: dict[str, int] = field(default_factory=dict[str, int])

    def see(self, turn: skpb.SkillTurn) -> None:
        c = self.counts
        c["turns"] = c.get("turns", 0) + 1
        c["offered"] = c.get("offered", 0) + len(turn.offered)
        c["viewed"] = c.get("viewed", 0) + len(turn.viewed)
        c["followed"] = c.get("followed", 0) + len(turn.followed)
        c[turn.review or "skipped"] = c.get(turn.review or "skipped", 0) + 1
        for key in turn.viewed:
            n, _ = self.uses.get(key, (0, 0))
            self.uses[key] = (n + 1, turn.time_ns)

    def see_record(self, record: Record) -> None:
        """Count one ledger record (a no-op but for ``skill.turn``)."""
        if record.kind == TURN_KIND:
            try:
                turn = skpb.SkillTurn.FromString(record.payload)
            except DecodeError:  # counts only: a bad record never stops a start
                return
            self.see(turn)

    def copy(self) -> Usage:
        return Usage(dict(self.uses), dict(self.counts))

    # The start-up image (docs/adr/0036-hands-one-start-pass.md).
    def image(self) -> sppb.SkillUsageImage:
        img = sppb.SkillUsageImage(counts=self.counts)
        img.uses.extend(
            sppb.SkillUseImage(key=k, views=n, last_ns=t) for k, (n, t) in self.uses.items()
        )
        return img

    @classmethod
    def restore(cls, img: sppb.SkillUsageImage) -> Usage:
        uses = {u.key: (u.views, u.last_ns) for u in img.uses}
        if len(uses) != len(img.uses):
            raise ValueError("a skill's usage is imaged twice")
        return cls(uses, dict(img.counts))


class Library:
    """The store plus what a turn needs of it (on the core's loop)."""

    def __init__(
        self,
        store: SkillStore,
        *,
        clock: Callable[[], int] = time.time_ns,
        files_root: str | None = None,
        sealed_root: str | None = None,
    ) -> None:
        self.store = store
        #: Where viewed versions with scripts are written for ``shell.run``
        #: (None: they are not; naga_core.skills._files).
        self.files_root = files_root
        #: Where sealed versions' files go instead: outside the home, on a
        #: memory-backed file system (None: they are not written).
        self.sealed_root = sealed_root
        self.usage = Usage()
        self._clock = clock
        self._indexes: dict[str, _Index] = {}
        #: Version folders written by this library (the core clears the
        #: roots at start), each with its sealing subject ('' for none): no
        #: thread hop to find them again, and a forget knows which to remove.
        self._written: dict[str, str] = {}
        self._scoped: dict[str, list[SkillRef]] = {}
        self._scoped_epoch: tuple[int, ...] | None = None

    def now_ns(self) -> int:
        return self._clock()

    def see(self, record: Record) -> None:
        """Feed one ledger record (a start's usage comes from its fold:
        :class:`Usage` in the start-up image)."""
        self.usage.see_record(record)

    def rebuild(self, ledger: Ledger) -> None:
        for record in ledger.iter_records():
            self.see(record)

    def _index(self, scope: str) -> _Index | None:
        """The scope's index, None when it holds no live skill. Built once
        per epoch and only for scopes with skills: a new session's empty
        scope costs no scan and no memory."""
        epoch = self.store.epoch
        if self._scoped_epoch != epoch:
            self._scoped = {}
            for ref in self.store.refs(archived=False):
                if not ref.forgotten:  # a forgotten subject's skills are never offered
                    self._scoped.setdefault(ref.scope, []).append(ref)
            self._scoped_epoch = epoch
            self._indexes = {}
        refs = self._scoped.get(scope)
        if not refs:
            return None
        found = self._indexes.get(scope)
        if found is not None:
            return found
        docs: list[tuple[SkillRef, SkillDoc]] = []
        for ref in refs:
            try:
                docs.append((ref, self.store.doc(self.store.version(ref.commit))))
            except SkillError:
                continue  # unreadable objects are the doctor's to report, not a turn's to fail
        bm25 = Bm25(weighted(r.name, d.description, d.body) for r, d in docs)
        found = _Index(epoch, docs, bm25)
        self._indexes[scope] = found
        return found

    def offer(self, session: str, peer: str, text: str, *, most: int, cap_tokens: int) -> Offer:
        """The skills most relevant to ``text`` the turn can see (its
        session's, its peer's, global; a nearer scope's skill hides a
        farther one of the same name), within ``cap_tokens``."""
        if most <= 0 or cap_tokens <= 0:
            return Offer(())
        hits: list[Offered] = []
        for scope in scopes_for(session, peer):
            index = self._index(scope)
            if index is None:
                continue
            for i, score in index.bm25.scores(text).items():
                if score >= MIN_SCORE:
                    ref, doc = index.refs[i]
                    hits.append(Offered(scope, ref.name, doc.description, score, ref.key))
        hits.sort(key=lambda o: -o.score)
        chosen: list[Offered] = []
        names: set[str] = set()
        used = 0
        for hit in hits:
            if hit.name in names:
                continue
            cost = 8 + len(f"- {hit.name}: {hit.description}".encode()) // _BYTES_PER_TOKEN
            if used + cost > cap_tokens:
                continue
            names.add(hit.name)
            chosen.append(hit)
            used += cost
            if len(chosen) >= most:
                break
        return Offer(tuple(chosen))

    async def view(self, session: str, peer: str, arguments_json: str) -> Viewed:
        """Answer a ``skill.view`` call."""
        try:
            args: object = json.loads(arguments_json or "{}")
        except ValueError as exc:
            return Viewed.failed(f"{VIEW_TOOL}: the arguments are not JSON: {exc}")
        if not isinstance(args, dict):
            return Viewed.failed(f"{VIEW_TOOL}: the arguments must be an object")
        name = args.get("name")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        path = args.get("path") or SKILL_FILE  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if not isinstance(name, str) or not isinstance(path, str):
            return Viewed.failed(f"{VIEW_TOOL}: name (and path) must be strings")
        try:
            ref = self.store.find(name, scopes_for(session, peer))
            if ref.archived:
                return Viewed.failed(f"{VIEW_TOOL}: skill {name} is archived")
            version = self.store.version(ref.commit)
            blob = version.tree.blob(path)
            if blob is None:
                files = ", ".join(e.path for e in version.tree.entries)
                return Viewed.failed(f"{VIEW_TOOL}: skill {name} has no file {path!r} ({files})")
            raw = self.store.blob(blob)
        except SkillError as exc:
            return Viewed.failed(f"{VIEW_TOOL}: {exc}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return Viewed.failed(f"{VIEW_TOOL}: {path} of {name} is not text ({len(raw)} bytes)")
        folder = await self.files_of(version)  # '' if none: the body is still worth showing
        result: dict[str, object] = {
            "name": name,
            "scope": ref.scope,
            "version": ref.commit.hex(),
            "path": path,
            "text": text[:_VIEW_CHARS],
            "truncated": len(text) > _VIEW_CHARS,
            "files": [e.path for e in version.tree.entries],
        }
        if folder:
            result["dir"] = folder
            result["run"] = (
                f"its files are read-only under {folder}; run a script with shell.run, "
                f"e.g. sh {folder}/scripts/<file>"
            )
        text = json.dumps(result, ensure_ascii=False)
        return Viewed(True, text, ref.key, folder)

    async def files_of(self, version: Version) -> str:
        """The folder of ``version``'s files, read-only ('' if it has none
        besides SKILL.md or they cannot be written: logged). The first view
        of a version writes them, on a worker thread: not on the core's loop."""
        root = self.sealed_root if version.subject else self.files_root
        if root is None or not has_files(version):
            return ""
        dest = folder_of(version, root)
        if dest in self._written:  # immutable, as its version: the same bytes
            return dest
        try:
            await trio.to_thread.run_sync(materialize, self.store, version, root)
        except (OSError, SkillError, BlobError) as exc:
            log.warning("skills: version %s's files could not be written out: %s", dest, exc)
            return ""
        self._written[dest] = version.subject
        return dest

    def forgotten(self) -> None:
        """A subject was forgotten: the folders of its versions' files go at
        once (blocking, small: a forget is rare). A turn that still names
        one finds it gone."""
        sealer = self.store.sealer
        for dest, subject in list(self._written.items()):
            if subject and (sealer is None or sealer.key_id(subject) is None):
                try:
                    clear(dest)
                except OSError as exc:
                    log.warning("skills: %s could not be removed at a forget: %s", dest, exc)
                    continue
                del self._written[dest]

    async def files_of_commit(self, commit: bytes) -> str:
        """:meth:`files_of` the version ``commit`` names ('' if it is not
        in the store: logged)."""
        try:
            version = self.store.version(commit)
        except (SkillError, BlobError) as exc:
            log.warning("skills: version %s is not in the store: %s", commit.hex(), exc)
            return ""
        return await self.files_of(version)

    def turn_entry(
        self,
        session: str,
        turn_id: str,
        offered: Iterable[str],
        viewed: Sequence[str],
        *,
        succeeded: bool,
        review: str,
        detail: str = "",
        subject: str = "",
    ) -> Entry:
        """The ``skill.turn`` record of a turn (fed to the usage as it is
        staged). Skills are named by their refs' keys; with ``subject`` (the
        turn's) and a sealer, the review's detail is sealed under it."""
        views = list(dict.fromkeys(viewed))
        turn = skpb.SkillTurn(
            session=session,
            turn_id=turn_id,
            offered=list(offered),
            viewed=views,
            # Followed: loaded, and the turn then succeeded.
            followed=views if succeeded else [],
            review=review,
            time_ns=self._clock(),
        )
        sealer = self.store.sealer
        if detail and subject and sealer is not None:
            turn.sealed.CopyFrom(sealer.seal_text(subject, detail[:2000], *_context(turn)))
        else:
            turn.detail = detail[:2000]
        self.usage.see(turn)
        return Entry.of(TURN_KIND, turn.SerializeToString())


def _context(turn: skpb.SkillTurn) -> tuple[str, ...]:
    """What a record's sealed detail is bound to (its kind, session, turn)."""
    return (TURN_KIND, turn.session, turn.turn_id)


def turn_detail(sealer: Sealing, turn: skpb.SkillTurn) -> str:
    """A ``skill.turn`` record's review detail, opened (or the marker
    saying why it cannot be: forgotten, unreadable)."""
    if not turn.HasField("sealed"):
        return turn.detail
    return sealer.open_text(turn.sealed, *_context(turn))


__all__ = [
    "MIN_SCORE",
    "TURN_KIND",
    "VIEW_SPEC",
    "VIEW_TOOL",
    "Library",
    "Offer",
    "Offered",
    "Usage",
    "Viewed",
    "turn_detail",
]
