"""``naga audit [--json]``: what an owner reads to know all is well.

One report, from the running core when there is one (over its socket, with
the owner's credential) and from the home's files otherwise: the
constitution's anchor and its last check, a ledger verify summary, every
process with its sandbox, the outstanding capability tokens, the plugins
with the egress their manifests ask, the scheduled jobs, skill and memory
counts (where this build has them), and the last rollback.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import sandbox
from naga.constants import MAX_PAGE_ENTRIES
from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga.v1 import core_pb2 as cpb
from naga.v1 import ledger_pb2 as lpb
from naga_core import constitution
from naga_core._doctor import sandbox_verdict
from naga_core._home import Home
from naga_core._store import blob_store, read_only_ledger
from naga_core.cli._audit_scan import AuditScan, Seen
from naga_core.cli._output import Outcome
from naga_core.errors import NagaError
from naga_core.ledger import VerifyReport
from naga_core.plugins import Catalog, PluginHost, PluginsConfig

HELP = "self-audit: constitution, ledger, processes, tokens, plugins, jobs, last rollback"


def add(sub: Any, command: Any) -> None:
    command(sub, "audit", audit, HELP)


def audit(_args: argparse.Namespace, home: Home) -> Outcome:
    if _answers(home):
        with Client.connect(home.root) as client:
            report = _report(home, client)
    else:
        report = _report(home, None)
    lines = _lines(report)
    healthy = report["constitution"]["matches"] and report["ledger"]["ok"]
    return Outcome(0 if healthy else 1, report, lines)


def _answers(home: Home) -> bool:
    """A core serves this home (its socket answers the owner)."""
    if not os.path.exists(os.path.join(home.root, "run", "core.sock")):
        return False
    try:
        with Client.connect(home.root) as client:
            client.head()
    except SdkError:
        return False
    return True


def _report(home: Home, client: Client | None) -> dict[str, Any]:
    out: dict[str, Any] = {"home": home.root, "core_running": client is not None}
    scan = AuditScan(_blob_of(home, client))
    if client is None:
        # Read-only: a stopped core's ledger is verified and read, never
        # opened (no lock taken, no torn tail cut, nothing written).
        report, view = read_only_ledger(home, full=True)
        anchored = constitution.effective(constitution.anchored_in(home, view))
        out["constitution"] = _constitution(home, anchored)
        out["ledger"] = _verified(report)
        scanned = _scan(scan, view.iter_records())
        out["processes"] = []
    else:
        checked = constitution.last_check(os.path.join(home.root, "run"))
        anchor = checked.get("anchor", "")
        out["constitution"] = _constitution(
            home, constitution.Anchor(anchor, "", 0) if anchor else None, checked
        )
        head = client.head()
        out["ledger"] = {
            "ok": True,
            "records": head.size,
            "root": head.root.hex(),
            "verified": "held by the running core: stop it for a full `naga ledger verify`",
        }
        out["processes"] = _processes(client.status())
        scanned = _scan(scan, _core_records(client, head.size))
    out.update(scanned)
    out["plugins"] = _plugins(home, client)
    return out


def _blob_of(home: Home, client: Client | None) -> Callable[[bytes], bytes | None]:
    blobs = blob_store(home)

    def blob(digest: bytes) -> bytes | None:
        try:
            return blobs.get(digest) if client is None else client.blob(digest)
        except (NagaError, SdkError):
            return None

    return blob


def _core_records(client: Client, size: int) -> Iterator[lpb.Record]:
    seq = 0
    while seq < size:
        page = client.records(seq, MAX_PAGE_ENTRIES)
        if not page:
            return
        for r in page:
            if r.seq >= size:
                return
            yield r
        seq = page[-1].seq + 1


def _constitution(
    home: Home, anchored: constitution.Anchor | None, checked: dict[str, str] | None = None
) -> dict[str, Any]:
    got = constitution.check(home, anchored) if anchored is not None else None
    return {
        "path": constitution.path_of(home),
        "anchor": anchored.sha256 if anchored else "",
        "source": anchored.source if anchored else "",
        "matches": bool(got and got.ok),
        "problem": (got.problem if got else "no constitution is anchored yet"),
        "last_check": checked if checked is not None else {},
    }


def _verified(report: VerifyReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "records": report.records,
        "segments": report.segments,
        "root": report.root.hex(),
        "problems": [str(p) for p in report.problems[:5]],
        "verified": "verified offline" if report.ok else f"{len(report.problems)} problem(s)",
    }


def _processes(status: cpb.StatusResponse) -> list[dict[str, Any]]:
    ok, verdict = sandbox_verdict(sandbox.detect())
    rows: list[dict[str, Any]] = []
    for p in status.processes:
        core = p.role == "core"
        rows.append(
            {
                "role": p.role,
                "pid": p.pid,
                "state": cpb.ProcessState.Name(p.state).removeprefix("PROCESS_STATE_").lower(),
                "restarts": p.restarts,
                "sandbox": "none: the privileged core"
                if core
                else ("enforced: " if ok else "DEGRADED: ") + verdict,
            }
        )
    return rows


def _scan(scan: AuditScan, records: Iterable[Seen]) -> dict[str, Any]:
    """One pass: tokens, the last rollback, jobs, skills and memory."""
    try:
        for r in records:
            scan.see(r)
    except (NagaError, SdkError) as exc:
        return {
            "tokens": {"error": str(exc)},
            "last_rollback": None,
            **{k: {"error": str(exc)} for k in ("jobs", "skills", "memory")},
        }
    return {
        "tokens": scan.tokens(),
        "last_rollback": scan.last_rollback,
        "jobs": scan.jobs(),
        "skills": scan.skills(),
        "memory": scan.memory(),
    }


def _plugins(home: Home, client: Client | None) -> list[dict[str, Any]]:
    enabled: dict[str, tuple[bool, str]] = {}
    if client is not None:
        for p in client.plugins():
            enabled[p.name] = (p.enabled, p.version)
    catalog = Catalog.scan(PluginHost.roots_of(home, PluginsConfig()))
    rows: list[dict[str, Any]] = []
    for name in catalog.names():
        chosen = catalog.get(name)
        if chosen is None:
            continue
        m = chosen.manifest
        rows.append(
            {
                "name": name,
                "version": m.version,
                "enabled": enabled.get(name, (None, ""))[0],
                "egress": [f"{e.host}:{e.port}" for e in m.egress],
                "capabilities": sorted(m.capabilities),
            }
        )
    return rows


def _lines(r: dict[str, Any]) -> list[str]:
    c, led = r["constitution"], r["ledger"]
    lines = [
        f"naga audit of {r['home']} (core {'running' if r['core_running'] else 'stopped'})",
        "constitution: "
        + (f"matches its anchor {c['anchor'][:16]}" if c["matches"] else f"FAIL {c['problem']}")
        + (f", last checked ok={c['last_check'].get('ok')}" if c["last_check"] else ""),
        f"ledger: {led.get('records', '?')} records, {led['verified']}",
    ]
    for p in r["processes"]:
        lines.append(f"process {p['role']} pid {p['pid']} {p['state']}: sandbox {p['sandbox']}")
    t = r["tokens"]
    if "error" in t:
        lines.append(f"tokens: cannot read: {t['error']}")
    else:
        roles = ", ".join(f"{k} {v}" for k, v in sorted(t["by_role"].items())) or "none"
        lines.append(f"tokens outstanding: {t['outstanding']} ({roles})")
    for p in r["plugins"]:
        egress = ", ".join(p["egress"]) or "no network"
        state = {True: "enabled", False: "disabled", None: "?"}[p["enabled"]]
        lines.append(f"plugin {p['name']} {p['version']} ({state}): egress {egress}")
    lines += _area_lines(r)
    lr = r["last_rollback"]
    lines.append(
        f"last rollback: entry {lr['seq']}, back to {lr['to_seq']}" if lr else "last rollback: none"
    )
    return lines


def _area_lines(r: dict[str, Any]) -> list[str]:
    j, sk, m = r["jobs"], r["skills"], r["memory"]
    if "error" in j:
        return [f"jobs, skills, memory: cannot read: {j['error']}"]
    lines = [
        f"jobs: {j['count']} ({j['paused']} paused)",
        f"skills: {sk['count']} ({sk['archived']} archived)",
        f"memory: {m['live_items']} live items ({m['written']} written, "
        f"{m['forgotten']} forgotten, {m['refused']} refused writes)",
    ]
    for area, rows in (("job", j["changes"]), ("skill", sk["changes"]), ("memory", m["changes"])):
        for c in rows[-3:]:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c["time_ns"] / 1e9))
            what = c.get("id") or c.get("skill") or c.get("subject", "")
            by = f" by {c['by']}" if "by" in c else ""
            lines.append(f"  {area} {what}: {c.get('change', c.get('effect'))}{by} ({when} UTC)")
    return lines


__all__ = ["HELP", "add", "audit"]
