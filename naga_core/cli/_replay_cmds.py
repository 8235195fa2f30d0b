"""``naga replay export SESSION -o FILE`` and ``naga replay run FILE``.

Export reads through the running core when there is one (the core owns the
ledger files then), else the files directly; both feed the same bundle
builder (docs/design/replay.md). Run needs no home: the bundle carries
everything, its checkpoint included.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from naga.sdk import Client
from naga_core._home import Home
from naga_core._store import blob_store, open_ledger
from naga_core.cli._output import Outcome
from naga_core.daemon import running_pid
from naga_core.errors import CommandRefused, ConfigError
from naga_core.memory import Sealer
from naga_core.replay import (
    BundleInvalid,
    CoreSource,
    LedgerSource,
    encode_bundle,
    export_trace,
    read_bundle,
    replay,
)

HELP = "export a session's trace as a bundle, or re-run a bundle's turns"
#: Larger than any honest bundle is expected to be; refuse before reading.
MAX_BUNDLE_BYTES = 1 << 30


def export(args: argparse.Namespace, home: Home) -> Outcome:
    session: str = args.session
    target: str = args.output
    at: int | None = args.at
    online = running_pid(home) is not None
    if online and at is not None:
        raise CommandRefused("--at reads the ledger files: stop the core first (naga daemon stop)")
    if online:
        with Client.connect(home.root) as core:
            bundle = export_trace(CoreSource(core), session, Sealer.reader(home))
    else:
        with open_ledger(home, create=False) as ledger:
            source = LedgerSource(ledger, blob_store(home), at)
            bundle = export_trace(source, session, Sealer.reader(home))
    data = encode_bundle(bundle)
    _write_atomically(target, data)
    turns = sum(r.kind == "turn.message" for r in bundle.records)
    facts = {
        "ok": True,
        "session": session,
        "file": target,
        "records": len(bundle.records),
        "turns": turns,
        "blobs": len(bundle.blobs),
        "bytes": len(data),
        "tree_size": bundle.tree_size,
        "via": "core" if online else "files",
    }
    return Outcome(
        0,
        facts,
        [
            f"exported session {session}: {turns} turn(s), {len(bundle.records)} records, "
            f"{len(bundle.blobs)} blobs, {len(data)} bytes -> {target}",
            f"proved against the signed checkpoint of {bundle.tree_size} records",
        ],
    )


def _write_atomically(target: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=".naga-replay-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def run(args: argparse.Namespace, _home: Home) -> Outcome:
    path: str = args.file
    try:
        size = os.path.getsize(path)
        if size > MAX_BUNDLE_BYTES:
            raise BundleInvalid(f"{path} is {size} bytes, more than a bundle may be")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read bundle {path}: {exc.strerror or exc}") from None
    bundle = read_bundle(data, allow_edited=args.allow_edited)
    report = replay(bundle)
    turns = [
        {
            "turn_id": t.turn_id,
            "status": t.status,
            "model_calls": t.model_calls,
            "tool_calls": t.tool_calls,
        }
        for t in report.turns
    ]
    d = report.divergence
    facts: dict[str, object] = {
        "ok": d is None,
        "session": report.session,
        "reproduced": report.reproduced,
        "turns": turns,
        "edited_records": list(bundle.edited),
        "divergence": None
        if d is None
        else {
            "turn": d.turn,
            "turn_id": d.turn_id,
            "step": d.step,
            "what": d.what,
            "expected": d.expected,
            "got": d.got,
            "diff": list(d.diff),
        },
    }
    lines = [f"bundle verified: session {bundle.session}, {len(bundle.records)} records"]
    if bundle.edited:
        lines.append(f"warning: records {list(bundle.edited)} were edited after export")
    for t in report.turns:
        if t.status != "reproduced":
            lines.append(f"turn {t.turn_id}: {t.status}")
    if d is None:
        lines.append(f"{report.reproduced} turns reproduced exactly")
        return Outcome(0, facts, lines)
    lines.append(f"{report.reproduced} turns reproduced before the divergence")
    return Outcome(1, facts, lines + d.describe())


__all__ = ["HELP", "export", "run"]
