"""``naga history | rollback | config | trust``: the kernel, through the core.

Every one of these goes through the running core (naga.sdk); none opens the
ledger itself, so with no core they fail saying how to start it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from naga.sdk import Client
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga_core._home import Home
from naga_core.cli._output import Outcome

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


def rollback(args: argparse.Namespace, home: Home) -> Outcome:
    to_seq: int = args.to
    dry_run: bool = args.dry_run
    with _connect(home) as core:
        # The owner's CLI acts for the owner: a rollback that brings back a
        # privilege is the owner's call, and this is the owner asking.
        resp = core.rollback(to_seq, dry_run=dry_run, by_owner=True)
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
    actions = [a.name for a in p.world_actions]
    data: dict[str, Any] = {
        "dry_run": dry_run,
        "to_seq": p.to_seq,
        "through_seq": p.through_seq,
        "effects_undone": p.effects,
        "changes": changes,
        "world_actions": actions,
        "irreversible_seqs": list(p.irreversible_seqs),
        "seq": resp.seq if resp.HasField("seq") else None,
    }
    head = (
        f"dry run: rolling back to {p.to_seq} would undo {p.effects} effect(s) "
        f"({p.to_seq + 1}..{p.through_seq})"
        if dry_run
        else f"rolled back to {p.to_seq}: undid {p.effects} effect(s) as ledger entry {resp.seq}"
    )
    lines = [head]
    lines += [
        f"  {c['family']}/{c['key']}: {_shown(c['before'])} -> {_shown(c['after'])}"
        for c in changes
    ]
    lines += [f"  runs: {name}" for name in actions]
    lines += [f"  cannot undo entry {s} (irreversible; it stays done)" for s in p.irreversible_seqs]
    if dry_run:
        lines.append("nothing was changed")
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
    "lanes.max_concurrent": "the gateway applies it now, to turns that start from now on",
    "lanes.queue_mode": "the gateway applies it now, to messages sent without a mode",
}


def _changed(resp: cpb.SetSettingResponse, unchanged: str) -> Outcome:
    d = _setting_data(resp.setting)
    seq = resp.seq if resp.HasField("seq") else None
    when = TAKES_EFFECT.get(d["name"]) if seq is not None else None
    note = f"ledger entry {seq}" if seq is not None else unchanged
    lines = [_setting_line(d), f"  {note}" + (f"; {when}" if when else "")]
    return Outcome(0, {**d, "seq": seq, "takes_effect": when}, lines)


def config_set(args: argparse.Namespace, home: Home) -> Outcome:
    with _connect(home) as core:
        resp = core.set_setting_text(args.name, args.value)
    return _changed(resp, "unchanged: it already held that value")


def config_reset(args: argparse.Namespace, home: Home) -> Outcome:
    with _connect(home) as core:
        resp = core.reset_setting(args.name)
    return _changed(resp, "unchanged: it had no value set")


def config_list(_args: argparse.Namespace, home: Home) -> Outcome:
    with _connect(home) as core:
        rows = [_setting_data(s) for s in core.list_settings()]
    return Outcome(0, {"settings": rows}, [_setting_line(d) for d in rows])


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
