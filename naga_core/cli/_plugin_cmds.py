"""``naga plugin list | enable NAME | disable NAME | replace NAME VERSION |
call NAME TOOL [JSON]``: the plugins of the running core (naga.sdk).

Enable, disable and replace are effects in the ledger (``naga history``
shows them; ``naga rollback`` undoes them). Exit status: 0 done (or nothing
to do); 1 refused or failed (the message says why); for ``enable`` and
``replace`` also 1 when the plugin did not reach the running state.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from naga.sdk import Client
from naga.v1 import plugin_pb2 as ppb
from naga.v1 import plugin_service_pb2 as spb
from naga_core._home import Home
from naga_core.cli._output import Outcome

#: How long enable and replace wait for the worker to run.
WAIT_S = 30.0

_STATES = {
    spb.PLUGIN_STATE_DISABLED: "disabled",
    spb.PLUGIN_STATE_STARTING: "starting",
    spb.PLUGIN_STATE_RUNNING: "running",
    spb.PLUGIN_STATE_FAILED: "failed",
    spb.PLUGIN_STATE_PENDING: "pending",
}
_KINDS = {
    ppb.PLUGIN_KIND_CHANNEL: "channel",
    ppb.PLUGIN_KIND_MODEL_PROVIDER: "model_provider",
    ppb.PLUGIN_KIND_TOOL: "tool",
}


def _plugin(p: spb.PluginInfo) -> dict[str, Any]:
    return {
        "name": p.name,
        "version": p.version,
        "versions": list(p.versions),
        "kind": _KINDS.get(p.kind, "unknown"),
        "enabled": p.enabled,
        "state": _STATES.get(p.state, "unknown"),
        "pid": p.pid,
        "restarts": p.restarts,
        "last_failure": p.last_failure,
        "directory": p.directory,
        "shipped": p.shipped,
        "tools": [{"name": t.name, "risk": f"R{t.risk - 1}"} for t in p.tools],
        "problems": list(p.problems),
    }


def _line(p: dict[str, Any]) -> str:
    pid = f"pid {p['pid']}" if p["pid"] else "-"
    tools = ", ".join(f"{t['name']} ({t['risk']})" for t in p["tools"])
    return f"{p['name']:<12} {p['version'] or '-':<8} {p['state']:<9} {pid:<10} {tools}"


def _detail_lines(p: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if p["restarts"]:
        lines.append(f"  restarted {p['restarts']} time(s)")
    if p["last_failure"]:
        lines.append(f"  last failure: {p['last_failure']}")
    lines += [f"  problem: {problem}" for problem in p["problems"]]
    return lines


def list_plugins(_args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        plugins = [_plugin(p) for p in core.plugins()]
    lines = [f"{'NAME':<12} {'VERSION':<8} {'STATE':<9} {'PID':<10} TOOLS"]
    for p in plugins:
        lines += [_line(p), *_detail_lines(p)]
    if not plugins:
        lines = ["no plugins are installed"]
    return Outcome(0, {"plugins": plugins}, lines)


def _settled(verb: str, p: dict[str, Any], changed: bool) -> Outcome:
    running = p["state"] == "running"
    head = (
        f"{p['name']} {p['version']} {verb}: {p['state']}"
        if changed
        else f"{p['name']} was already {verb}: {p['state']}"
    )
    return Outcome(
        0 if running else 1, {"plugin": p, "changed": changed}, [head, *_detail_lines(p)]
    )


def enable(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        resp = core.enable_plugin(args.name, wait=WAIT_S)
    return _settled("enabled", _plugin(resp.plugin), resp.changed)


def disable(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        resp = core.disable_plugin(args.name)
    p = _plugin(resp.plugin)
    head = f"{p['name']} disabled" if resp.changed else f"{p['name']} was not enabled"
    return Outcome(0, {"plugin": p, "changed": resp.changed}, [head])


def replace(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        resp = core.replace_plugin(args.name, args.version, wait=WAIT_S)
    p = _plugin(resp.plugin)
    outcome = _settled(f"replaced (was {resp.previous_version})", p, True)
    outcome.data["previous_version"] = resp.previous_version
    return outcome


def call(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        resp = core.invoke_raw(args.name, args.tool, args.arguments, timeout=args.timeout)
    result: object = json.loads(resp.result_json)
    return Outcome(
        0,
        {"result": result, "pid": resp.pid},
        [json.dumps(result, indent=2, ensure_ascii=False)],
    )


__all__ = ["call", "disable", "enable", "list_plugins", "replace"]
