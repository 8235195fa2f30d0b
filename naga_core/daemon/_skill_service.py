"""``naga.v1.SkillService``: the skill library for the owner's CLI
(docs/design/skills.md). Reads for the owner and the gateway (the console's
skills view); every change is the owner's and one kernel effect."""

from __future__ import annotations

import difflib

from naga.v1 import skills_pb2 as skpb
from naga_core.daemon import _checks
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import Method, Unary
from naga_core.daemon._core import Core
from naga_core.daemon._errors import RequestRefused
from naga_core.skills import (
    GLOBAL,
    Library,
    Reason,
    SkillNotFound,
    SkillRef,
    SkillRefused,
    Version,
    apply_curation,
    check_files,
    check_scope,
    lint_import,
    plan_curation,
)

SERVICE = "naga.v1.SkillService"
_MAX_NAME = 64
_MAX_SCOPE = 300
_MAX_REASON = 2000


class SkillServicer:
    def __init__(self, core: Core, library: Library) -> None:
        self._core = core
        self._library = library
        self._store = library.store

    def methods(self) -> list[Method]:
        return [
            Unary("List", skpb.ListSkillsRequest, self.list, check_list),
            Unary("Show", skpb.ShowSkillRequest, self.show, check_show),
            Unary("Log", skpb.SkillLogRequest, self.log, check_named),
            Unary("Diff", skpb.DiffSkillRequest, self.diff, check_named),
            Unary("Import", skpb.ImportSkillRequest, self.import_, check_import),
            Unary("Archive", skpb.SkillActionRequest, self.archive, check_named),
            Unary("Restore", skpb.SkillActionRequest, self.restore, check_named),
            Unary("Revert", skpb.RevertSkillRequest, self.revert, check_named),
            Unary("Stats", skpb.SkillStatsRequest, self.stats),
            Unary("Curate", skpb.CurateRequest, self.curate),
        ]

    # --- reading --------------------------------------------------------------------

    def _ref(self, name: str, scope: str) -> SkillRef:
        if scope:
            return self._store.need(scope, name)
        hits = [r for r in self._store.refs() if r.name == name and not r.forgotten]
        if not hits:
            raise SkillNotFound(f"no skill {name!r} in any scope")
        if len(hits) > 1 and not any(r.scope == GLOBAL for r in hits):
            where = ", ".join(r.scope for r in hits)
            raise SkillRefused(Reason.CONFLICT, f"skill {name} is in {where}: give --scope")
        return next((r for r in hits if r.scope == GLOBAL), hits[0])

    def _summary(self, ref: SkillRef) -> skpb.SkillSummary:
        uses, last = self._library.usage.uses.get(ref.key, (0, 0))
        if ref.forgotten:  # listed as what it is now, never an error or a blank
            return skpb.SkillSummary(
                scope=ref.scope,
                name=ref.name,
                description=ref.name,
                version=ref.commit.hex(),
                archived=ref.archived,
                pinned=ref.pinned,
                uses=uses,
                last_used_ns=last,
            )
        version = self._store.version(ref.commit)
        return skpb.SkillSummary(
            scope=ref.scope,
            name=ref.name,
            description=self._store.doc(version).description,
            version=ref.commit.hex(),
            archived=ref.archived,
            pinned=ref.pinned,
            author=version.commit.author,
            updated_ns=version.commit.time_ns,
            uses=uses,
            last_used_ns=last,
            versions=len(self._store.ancestry(ref.commit)),
        )

    def list(self, _p: Principal, req: skpb.ListSkillsRequest) -> skpb.ListSkillsResponse:
        refs = self._store.refs(req.scope or None, archived=req.archived)
        return skpb.ListSkillsResponse(skills=[self._summary(r) for r in refs])

    def show(self, _p: Principal, req: skpb.ShowSkillRequest) -> skpb.ShowSkillResponse:
        ref = self._ref(req.name, req.scope)
        version = (
            self._store.resolve(ref.scope, ref.name, req.version)
            if req.version
            else self._store.version(ref.commit)
        )
        files = self._store.files(version)
        executable = version.tree.executable
        return skpb.ShowSkillResponse(
            skill=self._summary(ref),
            version=_version(version),
            files=[
                skpb.SkillFile(path=p, data=d, executable=p in executable)
                for p, d in sorted(files.items())
            ],
        )

    def log(self, _p: Principal, req: skpb.SkillLogRequest) -> skpb.SkillLogResponse:
        ref = self._ref(req.name, req.scope)
        versions = self._store.ancestry(ref.commit)
        return skpb.SkillLogResponse(
            skill=self._summary(ref), versions=[_version(v) for v in versions]
        )

    def diff(self, _p: Principal, req: skpb.DiffSkillRequest) -> skpb.DiffSkillResponse:
        ref = self._ref(req.name, req.scope)
        a = self._store.files(self._store.resolve(ref.scope, ref.name, req.a))
        b = self._store.files(self._store.resolve(ref.scope, ref.name, req.b))
        out: list[str] = []
        for path in sorted(set(a) | set(b)):
            old, new = a.get(path, b""), b.get(path, b"")
            if old == new:
                continue
            try:
                lines = difflib.unified_diff(
                    old.decode().splitlines(keepends=True),
                    new.decode().splitlines(keepends=True),
                    f"{req.a}/{path}" if path in a else "/dev/null",
                    f"{req.b}/{path}" if path in b else "/dev/null",
                )
                out.append("".join(lines))
            except UnicodeDecodeError:
                out.append(f"Binary file {path} differs\n")
        return skpb.DiffSkillResponse(diff="".join(out))

    def stats(self, _p: Principal, _req: skpb.SkillStatsRequest) -> skpb.SkillStatsResponse:
        refs = self._store.refs()
        seen: set[bytes] = set()
        scopes: dict[str, int] = {}
        for ref in refs:
            if not ref.forgotten:
                seen.update(v.digest for v in self._store.ancestry(ref.commit))
            scopes[ref.scope] = scopes.get(ref.scope, 0) + 1
        c = self._library.usage.counts
        return skpb.SkillStatsResponse(
            skills=len(refs),
            archived=sum(r.archived for r in refs),
            versions=len(seen),
            scopes=[skpb.SkillScopeCount(scope=s, skills=n) for s, n in sorted(scopes.items())],
            turns=c.get("turns", 0),
            offered=c.get("offered", 0),
            viewed=c.get("viewed", 0),
            followed=c.get("followed", 0),
            created=c.get("created", 0),
            patched=c.get("patched", 0),
            refused=c.get("refused", 0),
            nothing=c.get("none", 0),
        )

    # --- changing (the owner's; each one effect) ------------------------------------------

    def _changed(self, ref: SkillRef, action: str) -> skpb.SkillChangeResponse:
        return skpb.SkillChangeResponse(
            skill=self._summary(ref), seq=self._core.ledger.next_seq - 1, action=action
        )

    def import_(self, _p: Principal, req: skpb.ImportSkillRequest) -> skpb.SkillChangeResponse:
        scope = req.scope or GLOBAL
        files = {f.path: f.data for f in req.files}
        if len(files) != len(req.files):
            raise RequestRefused.invalid("files: a path is given twice")
        executable = frozenset(f.path for f in req.files if f.executable)
        reason = req.reason or "imported by the owner"
        doc = check_files(files)
        # The owner is trusted, a downloaded folder is not (docs/design/skills.md,
        # "Owner imports"): a finding refuses unless the owner named its rule.
        allowed = lint_import(files, req.allow_lint)
        if allowed:
            reason = f"{reason}; {allowed}"[:_MAX_REASON]
        store = self._store
        if store.ref(scope, doc.name) is None:
            ref = self._core.write(
                lambda: store.create(scope, files, executable, author="owner", reason=reason)
            )
            return self._changed(ref, "created")
        ref = self._core.write(
            lambda: store.patch(scope, doc.name, files, executable, author="owner", reason=reason)
        )
        return self._changed(ref, "patched")

    def archive(self, _p: Principal, req: skpb.SkillActionRequest) -> skpb.SkillChangeResponse:
        ref = self._ref(req.name, req.scope)
        store = self._store
        reason = req.reason or "archived by the owner"
        self._core.write(lambda: store.archive(ref.scope, ref.name, author="owner", reason=reason))
        return self._changed(store.need(ref.scope, ref.name), "archived")

    def restore(self, _p: Principal, req: skpb.SkillActionRequest) -> skpb.SkillChangeResponse:
        ref = self._ref(req.name, req.scope)
        store = self._store
        reason = req.reason or "restored by the owner"
        self._core.write(lambda: store.restore(ref.scope, ref.name, author="owner", reason=reason))
        return self._changed(store.need(ref.scope, ref.name), "restored")

    def revert(self, _p: Principal, req: skpb.RevertSkillRequest) -> skpb.SkillChangeResponse:
        ref = self._ref(req.name, req.scope)
        store = self._store
        new = self._core.write(
            lambda: store.revert(ref.scope, ref.name, req.to, author="owner", reason=req.reason)
        )
        return self._changed(new, "reverted")

    def curate(self, _p: Principal, req: skpb.CurateRequest) -> skpb.CurateResponse:
        settings = self._core.settings
        actions = plan_curation(
            self._store,
            self._library.usage.uses,
            now_ns=self._library.now_ns(),
            stale_days=settings.get_int("skills.stale_days"),
            threshold=settings.get_real("skills.duplicate_threshold"),
        )
        out = skpb.CurateResponse(
            actions=[
                skpb.CurateAction(
                    kind=a.kind, scope=a.scope, name=a.name, merged=list(a.merged), why=a.why
                )
                for a in actions
            ]
        )
        if not req.dry_run and actions:
            store = self._store
            out.seq = self._core.write(lambda: apply_curation(store, actions))
        return out


def _version(v: Version) -> skpb.SkillVersion:
    c = v.commit
    return skpb.SkillVersion(
        version=v.digest.hex(),
        parents=[p.hex() for p in c.parents],
        author=c.author,
        reason=c.reason,
        action=c.action,
        time_ns=c.time_ns,
        tree=c.tree.hex(),
    )


# --- request checks (server thread) -----------------------------------------------------


def _scope(scope: str) -> None:
    if scope:
        _checks.text("scope", scope, max_chars=_MAX_SCOPE)
        try:
            check_scope(scope)
        except SkillRefused as exc:
            raise RequestRefused.invalid(str(exc)) from None


def check_list(req: skpb.ListSkillsRequest) -> None:
    _scope(req.scope)


def check_named(
    req: skpb.SkillLogRequest
    | skpb.DiffSkillRequest
    | skpb.SkillActionRequest
    | skpb.RevertSkillRequest,
) -> None:
    _checks.text("name", req.name, max_chars=_MAX_NAME)
    _scope(req.scope)
    if isinstance(req, skpb.SkillActionRequest | skpb.RevertSkillRequest):
        _checks.text("reason", req.reason, max_chars=_MAX_REASON, required=False)
    if isinstance(req, skpb.DiffSkillRequest):
        _checks.text("a", req.a, max_chars=64)
        _checks.text("b", req.b, max_chars=64)
    if isinstance(req, skpb.RevertSkillRequest):
        _checks.text("to", req.to, max_chars=64)


def check_show(req: skpb.ShowSkillRequest) -> None:
    _checks.text("name", req.name, max_chars=_MAX_NAME)
    _scope(req.scope)
    _checks.text("version", req.version, max_chars=64, required=False)


def check_import(req: skpb.ImportSkillRequest) -> None:
    _scope(req.scope)
    _checks.text("reason", req.reason, max_chars=_MAX_REASON, required=False)
    if len(req.allow_lint) > 8:
        raise RequestRefused.invalid("allow_lint: at most 8 rules")
    for rule in req.allow_lint:
        _checks.text("allow_lint", rule, max_chars=32)
    if not req.files:
        raise RequestRefused.invalid("files: a skill needs at least its SKILL.md")


__all__ = ["SERVICE", "SkillServicer"]
