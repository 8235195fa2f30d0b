"""``naga skill ...``: the skill library, through the real core
(naga.v1.SkillService; docs/design/skills.md). Reads print what the core
holds; every change is the owner's and one ledger effect, so ``naga
rollback`` can undo it. ``import PATH`` reads a SKILL.md folder here and
sends its bytes; ``export NAME -o DIR`` writes them back unchanged.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, TypeVar

from google.protobuf.message import Message

from naga.sdk import Client
from naga.skill_json import skill_summary, skill_version
from naga.v1 import skills_pb2 as skpb
from naga_core._home import Home
from naga_core.cli._output import Outcome
from naga_core.errors import CommandRefused
from naga_core.skills import SkillRefused, read_dir, write_dir

_S = "/naga.v1.SkillService/"
M = TypeVar("M", bound=Message)


def _call(home: Home, method: str, req: Message, resp: type[M], *, read: bool = True) -> M:
    with Client.connect(home.root) as core:
        return core.call(_S + method, req, resp, read=read)


def _when(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ns / 1e9)) if ns else "never"


def _line(s: skpb.SkillSummary) -> str:
    flags = "".join((" [archived]" if s.archived else "", " [pinned]" if s.pinned else ""))
    return f"{s.scope}/{s.name}  {s.version[:12]}  {s.description}{flags}"


def list_skills(args: argparse.Namespace, home: Home) -> Outcome:
    req = skpb.ListSkillsRequest(scope=args.scope or "", archived=args.all)
    skills = _call(home, "List", req, skpb.ListSkillsResponse).skills
    lines = [_line(s) for s in skills] or ["no skills"]
    return Outcome(0, {"skills": [skill_summary(s) for s in skills]}, lines)


def _show(args: argparse.Namespace, home: Home) -> skpb.ShowSkillResponse:
    req = skpb.ShowSkillRequest(name=args.name, scope=args.scope or "", version=args.version or "")
    return _call(home, "Show", req, skpb.ShowSkillResponse)


def show(args: argparse.Namespace, home: Home) -> Outcome:
    got = _show(args, home)
    files = {f.path: f.data for f in got.files}
    skill_md = files.get("SKILL.md", b"").decode(errors="replace")
    data: dict[str, Any] = {
        "skill": skill_summary(got.skill),
        "version": skill_version(got.version),
        "files": [
            {"path": f.path, "bytes": len(f.data), "executable": f.executable} for f in got.files
        ],
        "skill_md": skill_md,
    }
    lines = [
        f"{got.skill.scope}/{got.skill.name} at {got.version.version[:12]} "
        f"({got.version.action} by the {got.version.author}: {got.version.reason})",
        *(f"  {f.path} ({len(f.data)} bytes)" for f in got.files if f.path != "SKILL.md"),
        "",
        skill_md,
    ]
    return Outcome(0, data, lines)


def log(args: argparse.Namespace, home: Home) -> Outcome:
    req = skpb.SkillLogRequest(name=args.name, scope=args.scope or "")
    got = _call(home, "Log", req, skpb.SkillLogResponse)
    lines = [
        f"{v.version[:12]}  {_when(v.time_ns)}  {v.action} by the {v.author}: {v.reason}"
        + (f"  (parents {', '.join(p[:12] for p in v.parents)})" if len(v.parents) > 1 else "")
        for v in got.versions
    ]
    return Outcome(
        0,
        {"skill": skill_summary(got.skill), "versions": [skill_version(v) for v in got.versions]},
        lines,
    )


def diff(args: argparse.Namespace, home: Home) -> Outcome:
    req = skpb.DiffSkillRequest(name=args.name, scope=args.scope or "", a=args.a, b=args.b)
    got = _call(home, "Diff", req, skpb.DiffSkillResponse)
    return Outcome(0, {"diff": got.diff}, [got.diff.rstrip("\n") or "no difference"])


def _changed(got: skpb.SkillChangeResponse, verb: str) -> Outcome:
    s = got.skill
    return Outcome(
        0,
        {"skill": skill_summary(s), "seq": got.seq, "action": got.action or verb},
        [f"{s.scope}/{s.name} {got.action or verb} at {s.version[:12]} (entry {got.seq})"],
    )


def import_skill(args: argparse.Namespace, home: Home) -> Outcome:
    try:
        files, executable = read_dir(args.path)
    except SkillRefused as exc:
        raise CommandRefused(f"{args.path}: {exc}") from None
    except OSError as exc:
        raise CommandRefused(f"cannot read {args.path}: {exc}") from None
    req = skpb.ImportSkillRequest(
        scope=args.scope or "",
        reason=args.reason or f"imported from {os.path.abspath(args.path)}",
        files=[
            skpb.SkillFile(path=p, data=d, executable=p in executable)
            for p, d in sorted(files.items())
        ],
        allow_lint=args.allow_lint or [],
    )
    return _changed(_call(home, "Import", req, skpb.SkillChangeResponse, read=False), "imported")


def export_skill(args: argparse.Namespace, home: Home) -> Outcome:
    got = _show(args, home)
    files = {f.path: f.data for f in got.files}
    executable = frozenset(f.path for f in got.files if f.executable)
    try:
        write_dir(args.output, files, executable)
    except OSError as exc:
        raise CommandRefused(f"cannot write {args.output}: {exc}") from None
    return Outcome(
        0,
        {
            "skill": skill_summary(got.skill),
            "version": got.version.version,
            "dir": args.output,
            "files": sorted(files),
        },
        [
            f"{got.skill.name} {got.version.version[:12]}: {len(files)} files written "
            f"to {args.output}"
        ],
    )


def _action(method: str, verb: str) -> Any:
    def run(args: argparse.Namespace, home: Home) -> Outcome:
        req = skpb.SkillActionRequest(
            name=args.name, scope=args.scope or "", reason=args.reason or ""
        )
        return _changed(_call(home, method, req, skpb.SkillChangeResponse, read=False), verb)

    return run


def revert(args: argparse.Namespace, home: Home) -> Outcome:
    req = skpb.RevertSkillRequest(
        name=args.name, scope=args.scope or "", to=args.to, reason=args.reason or ""
    )
    return _changed(_call(home, "Revert", req, skpb.SkillChangeResponse, read=False), "reverted")


def stats(_args: argparse.Namespace, home: Home) -> Outcome:
    got = _call(home, "Stats", skpb.SkillStatsRequest(), skpb.SkillStatsResponse)
    data: dict[str, Any] = {
        k: getattr(got, k)
        for k in (
            "skills",
            "archived",
            "versions",
            "turns",
            "offered",
            "viewed",
            "followed",
            "created",
            "patched",
            "refused",
            "nothing",
        )
    }
    data["scopes"] = {s.scope: s.skills for s in got.scopes}
    lines = [
        f"{got.skills} skills ({got.archived} archived), {got.versions} versions",
        *(f"  {s.scope}: {s.skills}" for s in got.scopes),
        f"turns {got.turns}: offered {got.offered}, viewed {got.viewed}, followed {got.followed}",
        f"reviews: created {got.created}, patched {got.patched}, nothing {got.nothing}, "
        f"refused {got.refused}",
    ]
    return Outcome(0, data, lines)


def curate(args: argparse.Namespace, home: Home) -> Outcome:
    req = skpb.CurateRequest(dry_run=args.dry_run)
    got = _call(home, "Curate", req, skpb.CurateResponse, read=args.dry_run)
    acts = [
        {"kind": a.kind, "scope": a.scope, "name": a.name, "merged": list(a.merged), "why": a.why}
        for a in got.actions
    ]
    would = "would " if args.dry_run else ""
    lines = [
        f"{would}{a.kind} {a.scope}/{a.name}"
        + (f" <- {', '.join(a.merged)}" if a.merged else "")
        + f": {a.why}"
        for a in got.actions
    ] or ["nothing to curate"]
    return Outcome(0, {"dry_run": args.dry_run, "actions": acts, "seq": got.seq}, lines)


def add(sub: Any, command: Any) -> None:
    """The ``skill`` group (``command`` is _main's parser helper)."""
    skill = sub.add_parser("skill", help="the skill library: list, show, log, import, curate ...")
    ssub = skill.add_subparsers(dest="skill_command", required=True, metavar="ACTION")

    def scoped(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--scope", help="global, session/ID or peer/ID (default: find it)")
        return p

    ls = scoped(command(ssub, "list", list_skills, "the skills, with their current versions"))
    ls.add_argument("--all", action="store_true", help="archived ones too")
    for name, handler, text in (
        ("show", show, "a skill's SKILL.md and files (the current version or --version)"),
        ("export", export_skill, "write a skill's files into a folder, byte for byte"),
    ):
        p = scoped(command(ssub, name, handler, text))
        p.add_argument("name", metavar="NAME")
        p.add_argument("--version", metavar="HASH", help="a version hash or a prefix")
        if name == "export":
            p.add_argument("-o", "--output", required=True, metavar="DIR")
    scoped(command(ssub, "log", log, "a skill's versions, newest first")).add_argument("name")
    d = scoped(command(ssub, "diff", diff, "what changed between two versions"))
    d.add_argument("name", metavar="NAME")
    d.add_argument("a", metavar="A")
    d.add_argument("b", metavar="B")
    im = scoped(
        command(
            ssub, "import", import_skill, "import a SKILL.md folder (a new version if it exists)"
        )
    )
    im.add_argument("path", metavar="PATH")
    im.add_argument("--reason")
    im.add_argument(
        "--allow-lint",
        action="append",
        metavar="RULE",
        help="accept the poison lint's findings of this rule (prompt_injection, exfiltration, "
        "secret, credential_url); recorded in the version's reason",
    )
    for name, method, verb, text in (
        ("archive", "Archive", "archived", "stop offering a skill (kept; restore brings it back)"),
        ("restore", "Restore", "restored", "offer an archived skill again"),
    ):
        p = scoped(command(ssub, name, _action(method, verb), text))
        p.add_argument("name", metavar="NAME")
        p.add_argument("--reason")
    rv = scoped(command(ssub, "revert", revert, "a new version with an earlier version's files"))
    rv.add_argument("name", metavar="NAME")
    rv.add_argument("--to", required=True, metavar="HASH")
    rv.add_argument("--reason")
    command(ssub, "stats", stats, "counts: skills, versions, offers, views, reviews")
    cu = command(ssub, "curate", curate, "archive stale skills, merge near-duplicates (effects)")
    cu.add_argument("--dry-run", action="store_true", help="say what it would do, do nothing")


__all__ = ["add"]
