"""The console's read-only pages as protocol results: the core's proto
answers turned into the JSON the console shows (docs/protocol/websocket.md,
"Methods"; docs/console.md).

Pure functions of proto messages, so each page's shape is tested without a
connection. Nothing here shows a secret: settings carry values the kernel
already shows ``naga config list``; providers' keys never reach the core's
settings at all (they live in providers.json, read by the provider plugin).
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.message import DecodeError

from naga.v1 import agent_pb2 as apb
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import ledger_pb2 as lpb
from naga.v1 import plugin_pb2 as ppb
from naga.v1 import plugin_service_pb2 as spb
from naga.v1 import turn_pb2 as tpb

_KINDS = {
    cpb.SETTING_KIND_INTEGER: "integer",
    cpb.SETTING_KIND_REAL: "real",
    cpb.SETTING_KIND_TEXT: "text",
    cpb.SETTING_KIND_FLAG: "flag",
    cpb.SETTING_KIND_CHOICE: "choice",
}
_LEVELS = {
    cpb.TRUST_LEVEL_UNTRUSTED: "untrusted",
    cpb.TRUST_LEVEL_GUEST: "guest",
    cpb.TRUST_LEVEL_KNOWN: "known",
    cpb.TRUST_LEVEL_OWNER: "owner",
}
_STATES = {
    spb.PLUGIN_STATE_DISABLED: "disabled",
    spb.PLUGIN_STATE_STARTING: "starting",
    spb.PLUGIN_STATE_RUNNING: "running",
    spb.PLUGIN_STATE_FAILED: "failed",
    spb.PLUGIN_STATE_PENDING: "pending",
}
_FORMS = {
    kpb.EFFECT_FORM_REGISTER: "register",
    kpb.EFFECT_FORM_PERFORM: "perform",
    kpb.EFFECT_FORM_ACQUIRE: "acquire",
    kpb.EFFECT_FORM_RELEASE: "release",
    kpb.EFFECT_FORM_ROLLBACK: "rollback",
}
_ERROR_KINDS = {
    tpb.TURN_ERROR_KIND_MODEL: "model",
    tpb.TURN_ERROR_KIND_BUDGET: "budget",
    tpb.TURN_ERROR_KIND_STEPS: "steps",
    tpb.TURN_ERROR_KIND_ABORTED: "aborted",
    tpb.TURN_ERROR_KIND_EXECUTOR: "executor",
    tpb.TURN_ERROR_KIND_INTERNAL: "internal",
}
#: Records a history's detail reads past its first entry, at most: a bound
#: on one request's cost when other sessions wrote much meanwhile.
DETAIL_SCAN = 4096


def scalar(v: kpb.Value) -> Any:
    which = v.WhichOneof("kind")
    if which is None:
        return None
    got: Any = getattr(v, which)
    return got.hex() if isinstance(got, bytes) else got


def settings(resp: cpb.ListSettingsResponse) -> dict[str, Any]:
    return {
        "settings": [
            {
                "name": s.name,
                "kind": _KINDS.get(s.kind, "unknown"),
                "value": scalar(s.value),
                "default": scalar(s.default),
                "explicit": s.explicit,
                "rule": s.rule,
                "doc": s.doc,
                "problem": s.problem,
            }
            for s in resp.settings
        ]
    }


def trust(resp: cpb.ListTrustResponse) -> dict[str, Any]:
    return {
        "peers": [
            {"peer": e.peer, "level": _LEVELS.get(e.level, "untrusted")} for e in resp.entries
        ]
    }


def _risk(r: int) -> int:
    # ToolRisk numbers are the level plus one; unspecified counts as the worst.
    return r - 1 if r else 4


def plugins(resp: spb.ListPluginsResponse) -> dict[str, Any]:
    return {"plugins": plugins_of(list(resp.plugins))}


def plugins_of(infos: list[spb.PluginInfo]) -> list[dict[str, Any]]:
    return [
        {
            "name": p.name,
            "version": p.version,
            "kind": ppb.PluginKind.Name(p.kind).removeprefix("PLUGIN_KIND_").lower(),
            "enabled": p.enabled,
            "state": _STATES.get(p.state, "unknown"),
            "shipped": p.shipped,
            "restarts": p.restarts,
            "last_failure": p.last_failure,
            "problems": list(p.problems),
            "tools": [
                {"name": t.name, "risk": _risk(t.risk), "description": t.description}
                for t in p.tools
            ],
            # What it may reach (host:port, through the core's egress proxy
            # when it asks for it) and what else its manifest asks.
            "egress": list(p.egress),
            "capabilities": list(p.capabilities),
        }
        for p in infos
    ]


def ledger(resp: cpb.HistoryResponse) -> dict[str, Any]:
    return {
        "entries": [
            {
                "seq": e.seq,
                "time_ns": e.timestamp_ns,
                "kind": e.kind,
                "form": _FORMS.get(e.form),
                "description": e.description,
                "irreversible": e.irreversible,
            }
            for e in resp.entries
        ],
        "more": resp.more,
    }


def _json_or_text(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def turn_detail(session: str, records: list[lpb.Record]) -> dict[int, dict[str, Any]]:
    """What the plain history leaves out, from ``records`` (the ledger from
    the history's first entry on): tool calls, ended-without-answer turns and
    the core's notes as entries of their own, and each reply's usage, keyed by ledger seq."""
    out: dict[int, dict[str, Any]] = {}
    started: dict[str, int] = {}  # turn id -> its message's time, for a turn's wall time
    for rec in records:
        if rec.kind not in ("turn.message", "turn.tool", "turn.error", "turn.reply", "turn.note"):
            continue
        try:
            body = apb.TurnRecord.FromString(rec.payload)
        except DecodeError:
            continue  # `naga ledger verify` judges records, not the console
        if body.session != session:
            continue
        base: dict[str, Any] = {"seq": rec.seq, "time_ns": rec.timestamp_ns, "turn": body.turn_id}
        took = rec.timestamp_ns - started.get(body.turn_id, rec.timestamp_ns)
        if rec.kind == "turn.message":
            started[body.turn_id] = rec.timestamp_ns
        elif rec.kind == "turn.tool":
            out[rec.seq] = base | {
                "role": "tool",
                "tool": body.tool,
                "call": body.call_id,
                "arguments": _json_or_text(body.arguments_json),
                "ok": body.ok,
                "result": _json_or_text(body.result_json),
                "error": body.error,
                "duration_ms": body.duration_us / 1000,
                "text": "",
                "peer": "",
            }
        elif rec.kind == "turn.note":
            # The core's own word (a job's reply WeChat did not carry).
            out[rec.seq] = base | {"role": "note", "text": body.text, "peer": ""}
        elif rec.kind == "turn.error":
            out[rec.seq] = base | {
                "role": "error",
                "kind": _ERROR_KINDS.get(body.error_kind, "internal"),
                "message": body.error_message,
                "partial": body.text,
                "usage": usage(body, took),
                "text": body.text,
                "peer": "",
            }
        else:
            out[rec.seq] = {"usage": usage(body, took)}
    return out


def usage(body: apb.TurnRecord, took_ns: int) -> dict[str, Any]:
    """A turn's counts; ``took_ns``: from its message to its end."""
    return {
        "model_calls": body.model_calls,
        "tool_calls": body.tool_calls,
        "prompt_tokens": body.prompt_tokens,
        "completion_tokens": body.completion_tokens,
        "duration_ms": took_ns / 1e6,
    }


__all__ = [
    "DETAIL_SCAN",
    "ledger",
    "plugins",
    "plugins_of",
    "scalar",
    "settings",
    "trust",
    "turn_detail",
    "usage",
]
