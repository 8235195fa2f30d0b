"""``naga history | rollback | config | trust``: the kernel, through the core.

Every one of these goes through the running core (naga.sdk); none opens the
ledger itself, so with no core they fail saying how to start it.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse
from collections import Counter
from typing import Any

from naga.sdk import Client
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga_core._home import Home
from naga_core._providers import Providers, ProvidersFileError, providers_path
from naga_core.cli._output import Outcome
from naga_core.errors import CommandRefused

_FORMS = {
    kpb.EFFECT_FORM_REGISTER: "register",
    kpb.EFFECT_FORM_PERFORM: "perform",
    kpb.EFFECT_FORM_ACQUIRE: "acquire",
    kpb.EFFECT_FORM_RELEASE: "release",
    kpb.EFFECT_FORM_ROLLBACK: "rollback",
}
_LEVELS = {
    cpb.TRUST_LEVEL_UNTRUSTED: "untrusted",
    cpb.TRUST_LEVEL_GUEST: "guest",
    cpb.TRUST_LEVEL_KNOWN: "known",
    cpb.TRUST_LEVEL_OWNER: "owner",
}
_KINDS = {
    cpb.SETTING_KIND_INTEGER: "integer",
    cpb.SETTING_KIND_REAL: "real",
    cpb.SETTING_KIND_TEXT: "text",
    cpb.SETTING_KIND_FLAG: "flag",
    cpb.SETTING_KIND_CHOICE: "choice",
}


def _connect(home: Home) -> Client:
    return Client.connect(home.root)


def _scalar(v: kpb.Value | None) -> Any:
    if v is None:
        return None
    which = v.WhichOneof("kind")
    if which is None:
        return None
    got: Any = getattr(v, which)
    return got.hex() if isinstance(got, bytes) else got


def _shown(v: Any) -> str:
    if v is None:
        return "(absent)"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, str) else str(v)


def _iso(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns / 1e9))


# --- history and rollback ------------------------------------------------------------


def history(args: argparse.Namespace, home: Home) -> Outcome:
    with _connect(home) as core:
        resp = core.history(limit=args.limit)
    entries = [
        {
            "seq": e.seq,
            "time": _iso(e.timestamp_ns),
            "timestamp_ns": e.timestamp_ns,
            "kind": e.kind,
            "form": _FORMS.get(e.form),
            "description": e.description,
            "irreversible": e.irreversible,
        }
        for e in resp.entries
    ]
    lines = [f"{'SEQ':>6}  {'TIME (UTC)':<19}  {'FORM':<8}  WHAT"]
    for e in entries:
        what = e["description"] or e["kind"]
        mark = "  [irreversible]" if e["irreversible"] else ""
        lines.append(f"{e['seq']:>6}  {e['time']:<19}  {e['form'] or '-':<8}  {what}{mark}")
    if not entries:
        lines = ["the ledger has no entries yet"]
    elif resp.more:
        lines.append(f"(older entries before seq {resp.next_before_seq}: use --limit)")
    data = {"entries": entries, "more": resp.more, "next_before_seq": resp.next_before_seq}
    return Outcome(0, data, lines)


def change_words(family: str, key: str, now: Any, after: Any) -> str:
    """What undoing one state change does, in words a person reads:
    "disable plugin clock", "set agent.max_steps back to 8"."""
    name = key.replace(":", " ")
    if family == "component.enabled":
        return f"disable {name}" if after is None else f"enable {name}"
    if family == "component":
        return f"stop {name}" if after is None else f"start {name}"
    if family == "setting":
        return (
            f"reset {key} to its default" if after is None else f"set {key} back to {_shown(after)}"
        )
    if family == "trust":
        if after is None:
            return f"remove {key} from the trust table"
        return f"set {key}'s trust back to {_LEVEL_WORDS.get(after, _shown(after))}"
    if family == "plugin.version":
        return f"switch plugin {key} back to version {_shown(after)}"
    if family == "budget.spent":  # a token's spending (naga_core.authz)
        if after is None:
            return f"refund what token {key} spent"
        return f"set what token {key} spent back to {_shown(after)}"
    if family == "token.revoked":  # a worker's tokens are revoked when it ends
        return f"lift the revocation of token {key}" if after is None else f"revoke token {key}"
    verb = "remove" if after is None else "restore"
    return f"{verb} {family} {key}" + ("" if after is None else f" ({_shown(after)})")


_LEVEL_WORDS: dict[Any, str] = {1: "untrusted", 2: "guest", 3: "known", 4: "owner"}
_LEVEL_WORDS.update({v: v for v in ("untrusted", "guest", "known", "owner")})


def action_words(name: str, args: dict[str, Any]) -> str:
    """A world action a rollback runs, in words: "start plugin clock"."""
    what = " ".join(str(v).replace(":", " ") for v in args.values()) if args else ""
    verb = {"component.start": "start", "component.stop": "stop"}.get(name)
    if verb is not None:
        return f"{verb} {what}".strip()
    if name == "workspace.apply":  # naga_core.workspace: a stored change set, put back
        return f"restore the files the undone tool calls changed in {args.get('root', '?')}"
    return f"run {name}" + (f" on {what}" if what else "")


def _preview(resp: cpb.RollbackResponse, dry_run: bool) -> dict[str, Any]:
    p = resp.preview
    changes = [
        {
            "family": c.family,
            "key": c.key,
            "before": _scalar(c.before if c.HasField("before") else None),
            "after": _scalar(c.after if c.HasField("after") else None),
        }
        for c in p.changes
    ]
    for c in changes:
        c["words"] = change_words(c["family"], c["key"], c["before"], c["after"])
    actions = [
        {
            "name": a.name,
            "words": action_words(a.name, {k: _scalar(v) for k, v in sorted(a.args.items())}),
        }
        for a in p.world_actions
    ]
    return {
        "dry_run": dry_run,
        "to_seq": p.to_seq,
        "through_seq": p.through_seq,
        "effects_undone": p.effects,
        "changes": changes,
        "world_actions": [a["name"] for a in actions],
        "world_action_words": [a["words"] for a in actions],
        "irreversible_seqs": list(p.irreversible_seqs),
        "kept_seqs": list(p.kept_seqs),
        "seq": resp.seq if resp.HasField("seq") else None,
    }


def _preview_lines(data: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if data["effects_undone"] == 0:
        return [f"nothing to undo after entry {data['to_seq']}"]
    lines += [f"  {c['words']}" for c in data["changes"]]
    # One line per kind of action: two tool calls' restores read as one.
    said_actions: Counter[str] = Counter(data["world_action_words"])
    lines += [f"  {w}" + (f" ({n} times)" if n > 1 else "") for w, n in said_actions.items()]
    said = {e["seq"]: e["text"] for e in data.get("entries", [])}
    kept = set(data["kept_seqs"])
    lines += [
        f"  undoes entry {seq}: {text}"
        for seq, text in said.items()
        if seq not in data["irreversible_seqs"] and seq not in kept
    ]
    if len(kept) > _KEPT_NAMED:  # three per restart: one line, not a screenful
        seqs = ", ".join(str(s) for s in data["kept_seqs"])
        lines.append(
            f"  keeps {len(kept)} token revocations as they are "
            f"(a revocation is never lifted): entries {seqs}"
        )
    else:
        lines += [
            f"  keeps entry {s} as it is (a revocation is never lifted)"
            + (f": {said[s]}" if s in said else "")
            for s in data["kept_seqs"]
        ]
    lines += [
        f"  cannot undo entry {s}: it stays done (irreversible)"
        + (f": {said[s]}" if s in said else "")
        for s in data["irreversible_seqs"]
    ]
    return lines


#: Kept entries (revocations) named one by one at most; more get one line.
_KEPT_NAMED = 3
#: Undone entries described by name at most (the newest); the rest by seq.
_DESCRIBED = 100


def _undone_entries(core: Client, preview: dict[str, Any]) -> list[dict[str, Any]]:
    """The effects a rollback undoes, newest first, in the words of their
    entries ("tool fs.write in turn ...: 1 path(s) changed (hello.txt)"):
    the changes alone name kernel keys, not what the owner did."""
    if preview["effects_undone"] == 0:
        return []
    page = core.history(_DESCRIBED, preview["through_seq"] + 1)
    return [
        {"seq": e.seq, "text": e.description}
        for e in page.entries
        if e.seq > preview["to_seq"] and e.kind == "kernel.effect" and e.description
    ]


def rollback(args: argparse.Namespace, home: Home) -> Outcome:
    to_seq: int = args.to
    dry_run: bool = args.dry_run
    yes: bool = getattr(args, "yes", False)
    as_json: bool = args.json
    with _connect(home) as core:
        # The owner's CLI acts for the owner: a rollback that brings back a
        # privilege is the owner's call, and this is the owner asking.
        preview = _preview(core.rollback(to_seq, dry_run=True, by_owner=True), True)
        preview["entries"] = _undone_entries(core, preview)
        span = f"{preview['to_seq'] + 1}..{preview['through_seq']}"
        head = (
            f"rolling back to {to_seq} would undo {preview['effects_undone']} effect(s) ({span}):"
        )
        if dry_run or preview["effects_undone"] == 0:
            lines = [f"dry run: {head}", *_preview_lines(preview), "nothing was changed"]
            return Outcome(0, preview, lines)
        if not yes:
            if as_json or not sys.stdin.isatty():
                raise CommandRefused(
                    f"rollback to {to_seq} would undo {preview['effects_undone']} effect(s); "
                    "add --yes to do it, or --dry-run to see what it would undo"
                )
            sys.stdout.write("\n".join([head, *_preview_lines(preview)]) + "\n")
            answer = input(f"undo these {preview['effects_undone']} effect(s)? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                return Outcome(1, {**preview, "dry_run": True}, ["cancelled: nothing was changed"])
        data = _preview(core.rollback(to_seq, dry_run=False, by_owner=True), False)
        data["entries"] = preview["entries"]
    lines = [
        f"rolled back to {to_seq}: undid {data['effects_undone']} effect(s) "
        f"as ledger entry {data['seq']}",
        *_preview_lines(data),
    ]
    return Outcome(0, data, lines)


# --- config --------------------------------------------------------------------------


def _setting_data(s: cpb.Setting) -> dict[str, Any]:
    return {
        "name": s.name,
        "kind": _KINDS.get(s.kind),
        "value": _scalar(s.value),
        "default": _scalar(s.default),
        "explicit": s.explicit,
        "rule": s.rule,
        "doc": s.doc,
        "problem": s.problem or None,
    }


def _setting_line(d: dict[str, Any]) -> str:
    origin = "set" if d["explicit"] else "default"
    return f"{d['name']} = {_shown(d['value'])}  ({origin}; {d['rule']})"


def config_get(args: argparse.Namespace, home: Home) -> Outcome:
    with _connect(home) as core:
        d = _setting_data(core.get_setting(args.name))
    lines = [_setting_line(d), f"  {d['doc']}", f"  default: {_shown(d['default'])}"]
    if d["problem"]:
        lines.append(f"  problem: {d['problem']}")
    return Outcome(0, d, lines)


#: When a change of each setting takes effect (docs/operations.md, "Settings").
TAKES_EFFECT = {
    "agent.max_steps": "takes effect from the next turn",
    "model.timeout_s": "takes effect from the next model call",
    "model.provider": "takes effect from the next model call (the provider worker is switched)",
    "gateway.port": "the core's gateway moves to this port now, unless the core was started "
    "with --gateway-port; open the console at the new port",
    "lanes.max_concurrent": "the core applies it now: waiting turns start if it rose",
    "lanes.queue_mode": "the gateway applies it now, to messages sent without a mode",
    "workspace.path": "tool calls use it from the next one; the fs plugin sees it from its "
    "next start (naga plugin disable fs; naga plugin enable fs)",
    "tools.max_risk": "takes effect from the next turn",
    "tools.approve_from": "takes effect from the next tool call (and the next turn's offer)",
    "tools.approval_timeout_s": "takes effect from the next approval asked",
    "egress.loopback_hosts": "takes effect from the next connection a plugin opens",
    "web.allowed_hosts": "takes effect from the next connection web.fetch opens",
    "wechat.api_base": "takes effect from the next QR login and the WeChat plugin's next "
    "connection (its egress follows)",
    "wechat.cdn_base": "takes effect from the WeChat plugin's next media transfer "
    "(its egress follows)",
    "ledger.snapshot_every": "takes effect from the next start-up snapshot due",
    "ledger.reverify_days": "takes effect from the core's next look for sealed segments due "
    "for their rehash (at the next start, or within a day)",
    "constitution.check_s": "takes effect from the next check of the constitution",
    "skills.offer_max": "takes effect from the next turn's prompt",
    "skills.offer_tokens": "takes effect from the next turn's prompt",
    "skills.review": "takes effect from the next turn that ends",
    "skills.review_min_tools": "takes effect from the next turn that ends",
    "skills.duplicate_threshold": "takes effect from the next skill written or curation",
    "skills.stale_days": "takes effect from the next curation",
    "skills.curate_every_h": "takes effect from the next idle-time check of the curator",
    "memory.distill_idle_h": "takes effect from the next look for idle sessions (within "
    "a minute when it was 0, else within 5 minutes)",
}


def _changed(resp: cpb.SetSettingResponse, unchanged: str) -> Outcome:
    d = _setting_data(resp.setting)
    seq = resp.seq if resp.HasField("seq") else None
    when = TAKES_EFFECT.get(d["name"]) if seq is not None else None
    note = f"ledger entry {seq}" if seq is not None else unchanged
    lines = [_setting_line(d), f"  {note}" + (f"; {when}" if when else "")]
    return Outcome(0, {**d, "seq": seq, "takes_effect": when}, lines)


def check_provider(home: Home, value: str) -> None:
    """Refuse a ``model.provider`` value that names no provider: caught
    here rather than at the next turn."""
    if value in ("", "local"):
        return
    path = providers_path(home)
    try:
        names = sorted(Providers.load(home).by_name)
    except ProvidersFileError as exc:
        raise CommandRefused(
            f"cannot set model.provider to {value!r}: {exc.reason} ({path}); "
            "fix the file (`naga doctor` checks it) or use 'local' for the embedded model"
        ) from None
    if value not in names:
        raise CommandRefused(
            f"model.provider: {value!r} is not a provider of {path} "
            f"(it lists: {', '.join(names)}; or 'local' for the embedded model)"
        )


def config_set(args: argparse.Namespace, home: Home) -> Outcome:
    if args.name == "model.provider":
        check_provider(home, args.value)
    with _connect(home) as core:
        resp = core.set_setting_text(args.name, args.value)
    return _changed(resp, "unchanged: it already held that value")


def config_reset(args: argparse.Namespace, home: Home) -> Outcome:
    with _connect(home) as core:
        resp = core.reset_setting(args.name)
    return _changed(resp, "unchanged: it had no value set")


def _served_port(core: Client) -> int | None:
    """The port the running core's gateway serves on, if it runs one."""
    for row in core.status().processes:
        if row.role == "gateway" and row.state == cpb.PROCESS_STATE_RUNNING and row.detail:
            port = urllib.parse.urlsplit(row.detail).port
            if port:
                return port
    return None


def config_list(_args: argparse.Namespace, home: Home) -> Outcome:
    """Every setting as in effect, and where its value comes from: the
    ledger (set), the default, or for gateway.port a --gateway-port flag
    that wins over both while the core runs."""
    with _connect(home) as core:
        rows = [_setting_data(s) for s in core.list_settings()]
        served = _served_port(core)
    lines: list[str] = []
    for d in rows:
        d["source"] = "set" if d["explicit"] else "default"
        d["effective"] = d["value"]
        if d["name"] == "gateway.port" and served is not None and served != d["value"]:
            d["source"] = "--gateway-port"
            d["effective"] = served
        lines.append(_list_line(d))
    return Outcome(0, {"settings": rows}, lines)


def _list_line(d: dict[str, Any]) -> str:
    where = {
        "set": "set in the ledger",
        "default": "default",
        "--gateway-port": f"the core's --gateway-port flag; the setting says {_shown(d['value'])}",
    }[d["source"]]
    return f"{d['name']} = {_shown(d['effective'])}  ({where}; {d['rule']})"


# --- trust ---------------------------------------------------------------------------


def trust_show(args: argparse.Namespace, home: Home) -> Outcome:
    with _connect(home) as core:
        found = [core.get_trust(args.peer)] if args.peer else core.list_trust()
    rows = [{"peer": e.peer, "level": _LEVELS.get(e.level), "explicit": e.explicit} for e in found]
    lines = [f"{r['peer']}: {r['level']}" + ("" if r["explicit"] else " (no entry)") for r in rows]
    if not rows:
        lines = ["no peers in the trust table (unknown peers are untrusted)"]
    return Outcome(0, {"entries": rows}, lines)


def trust_set(args: argparse.Namespace, home: Home) -> Outcome:
    with _connect(home) as core:
        resp = core.set_trust(args.peer, args.level, by_owner=True, reason=args.reason)
    seq = resp.seq if resp.HasField("seq") else None
    level = _LEVELS.get(resp.entry.level)
    note = f"ledger entry {seq}" if seq is not None else "unchanged: it already had that level"
    data = {"peer": resp.entry.peer, "level": level, "seq": seq}
    return Outcome(0, data, [f"{resp.entry.peer}: {level}", f"  {note}"])


__all__ = [
    "config_get",
    "config_list",
    "config_reset",
    "config_set",
    "history",
    "rollback",
    "trust_set",
    "trust_show",
]
