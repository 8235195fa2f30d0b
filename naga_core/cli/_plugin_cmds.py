"""``naga plugin list | install PATH|ARCHIVE [--yes] | remove NAME |
enable NAME | disable NAME | replace NAME VERSION | call NAME TOOL [JSON]``:
the plugins of the running core (naga.sdk).

``install`` shows what the manifest asks (capabilities, egress, tools and
their risk levels, the code's sha256) and installs only with the owner's
yes (the prompt, or ``--yes``); the core installs exactly the code shown.
Install and remove are ledger effects like enable and disable.

Enable, disable and replace are effects in the ledger (``naga history``
shows them; ``naga rollback`` undoes them). Exit status: 0 done (or nothing
to do); 1 refused or failed (the message says why); for ``enable`` and
``replace`` also 1 when the plugin did not reach the running state.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

from naga.sdk import Client
from naga.v1 import plugin_pb2 as ppb
from naga.v1 import plugin_service_pb2 as spb
from naga_core._home import Home
from naga_core.cli._output import Outcome
from naga_core.plugins import code_hash, consent, read_manifest, unpack

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


def install(args: argparse.Namespace, home: Home) -> Outcome:
    source = os.path.abspath(args.source)
    with tempfile.TemporaryDirectory(prefix="naga-install-") as staging:
        found = unpack(source, staging)
        manifest = read_manifest(found, source, local_network=args.allow_local_network)
        digest = code_hash(found)
    shown = consent(manifest, digest, source)
    if args.allow_local_network:
        shown.insert(-1, "  and you allow it egress to this machine or its private network")
    asks: dict[str, Any] = {
        "name": manifest.name,
        "version": manifest.version,
        "kind": manifest.kind.value,
        "capabilities": sorted(manifest.capabilities),
        "egress": [{"host": e.host, "port": e.port} for e in manifest.egress],
        "tools": [{"name": t.name, "risk": f"R{int(t.risk)}"} for t in manifest.tools],
        "code_hash": digest,
    }
    if not args.yes and not _approved(shown, as_json=args.json):
        refused = "not installed: the owner did not approve it (answer y, or pass --yes)"
        data = {"ok": False, "installed": False, "asks": asks, "error": refused}
        sys.stderr.write(f"naga: {refused}\n")
        return Outcome(1, data, [] if sys.stdin.isatty() else shown)
    with Client.connect(home.root) as core:
        done = core.install_plugin(source, digest, local_network=args.allow_local_network)
    lines = [] if (sys.stdin.isatty() and not args.yes) else list(shown)
    lines.append(
        f"installed {done.name} {done.version} in {done.directory} (ledger entry {done.seq})"
    )
    if done.previous_versions:
        lines.append(f"  beside {', '.join(done.previous_versions)}; the newest runs")
    if done.restart_needed:
        lines.append("  a new plugin: restart the core to load it (naga daemon stop; start)")
    else:
        lines.append(f"  `naga plugin enable {done.name}` runs it")
    data = {
        "ok": True,
        "installed": True,
        "asks": asks,
        "directory": done.directory,
        "seq": done.seq,
        "previous_versions": list(done.previous_versions),
        "restart_needed": done.restart_needed,
    }
    return Outcome(0, data, lines)


def _approved(shown: list[str], *, as_json: bool) -> bool:
    """The owner's answer at the prompt; no prompt without a terminal."""
    if as_json or not sys.stdin.isatty():
        return False
    for line in shown:
        sys.stdout.write(line + "\n")
    try:
        answer = input("Install it? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def remove(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        done = core.remove_plugin(args.name)
    lines = [f"removed {args.name} (ledger entry {done.seq}); its files stay, never run:"]
    lines += [f"  {d}" for d in done.directories]
    data = {"ok": True, "removed": list(done.directories), "seq": done.seq}
    return Outcome(0, data, lines)


__all__ = [
    "call",
    "disable",
    "enable",
    "install",
    "list_plugins",
    "remove",
    "replace",
]
