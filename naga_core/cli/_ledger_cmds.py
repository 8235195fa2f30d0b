"""``naga ledger verify | recover | head | prove SEQ | rebuild``.

These open the ledger files directly. While naga-core runs it owns them:
``head`` and ``prove`` then ask it (naga.sdk), and the others refuse with a
clear message instead of racing it for the ledger.
"""

from __future__ import annotations

import argparse
import base64

from naga.sdk import Client
from naga.v1 import ledger_pb2 as lpb
from naga_core._home import Home
from naga_core._store import blob_store, open_ledger, projection_path, verifier_for
from naga_core.cli._output import Outcome, Progress
from naga_core.daemon import running_pid
from naga_core.errors import ConfigError
from naga_core.ledger import InclusionProof, OsFileSystem, Projection, verify_ledger


def _refuse_while_serving(home: Home, action: str) -> None:
    pid = running_pid(home)
    if pid is not None:
        raise ConfigError(
            f"naga-core (pid {pid}) is running and owns the ledger of {home.root}; "
            f"`naga ledger {action}` works on the files directly: stop the core first "
            "(naga daemon stop)"
        )


def verify(_args: argparse.Namespace, home: Home) -> Outcome:
    _refuse_while_serving(home, "verify")
    if not home.exists():
        raise ConfigError(f"no Naga home at {home.root} (set NAGA_HOME or pass --home)")
    report = verify_ledger(
        OsFileSystem(),
        home.ledger_dir,
        verifier_for(home),
        blobs=blob_store(home),
        projection_path=projection_path(home),
    )
    data = {
        "ok": report.ok,
        "records": report.records,
        "segments": report.segments,
        "sealed_segments": report.sealed,
        "checkpoints_verified": report.checkpoints,
        "blobs_referenced": report.blobs,
        "root": report.root.hex(),
        "problems": [
            {"path": p.path, "offset": p.offset, "problem": p.what} for p in report.problems
        ],
        "notes": report.notes,
    }
    if report.ok:
        lines = [
            f"records: {report.records} in {report.segments} segments "
            f"({report.sealed} sealed; their checkpoints and consistency proofs verified)",
            f"blobs referenced: {report.blobs}",
            f"root: {report.root.hex()}",
        ]
    else:
        lines = [f"checked until the first fault: {report.records} records"]
    lines += [f"note: {n}" for n in report.notes]
    lines += [f"FAIL {p}" for p in report.problems]
    lines.append(
        "ledger verified"
        if report.ok
        else f"ledger NOT verified: {len(report.problems)} problem(s)"
    )
    return Outcome(0 if report.ok else 1, data, lines)


def recover(_args: argparse.Namespace, home: Home) -> Outcome:
    _refuse_while_serving(home, "recover")
    with open_ledger(home, create=False) as ledger:
        rep = ledger.report
        # What a start does too: a projection behind the log catches up.
        projection = Projection.open(projection_path(home))
        try:
            caught = projection.catch_up(ledger)
        finally:
            projection.close()
    data = {
        "ok": True,
        "records": rep.size,
        "cut": [
            {"path": c.path, "offset": c.offset, "bytes": c.bytes_cut, "reason": c.reason}
            for c in rep.cut
        ],
        "removed": [*rep.removed, *rep.blobs_cleaned],
        "projection_applied": caught.applied,
        "projection_rebuilt": caught.rebuilt,
    }
    lines = rep.lines()
    if caught.applied:
        how = f"rebuilt ({caught.reason})" if caught.rebuilt else "caught up"
        lines.append(f"projection {how}: {caught.applied} records applied")
    if not rep.cleaned and not caught.applied:
        lines.append("nothing to recover")
    return Outcome(0, data, lines)


def _head_from_core(home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        h = core.head()
        last = core.records(h.last_seq, 1)[0].leaf_hash if h.size else bytes(32)
    verifier = verifier_for(home)
    data = {
        "size": h.size,
        "last_seq": h.size - 1 if h.size else None,
        "last_leaf_hash": last.hex(),
        "root": h.root.hex(),
        "sealed_segments": None,  # the core does not report it (yet)
        "checkpoint": h.checkpoint,
        "key_name": verifier.key_name,
        "vkey": verifier.vkey(),
        "via": "naga-core",
    }
    lines = [
        f"records: {h.size}",
        f"root: {h.root.hex()}",
        "checkpoint (signed by the running core):",
        *("  " + line for line in h.checkpoint.splitlines()),
    ]
    return Outcome(0, data, lines)


def head(_args: argparse.Namespace, home: Home) -> Outcome:
    if running_pid(home) is not None:
        return _head_from_core(home)
    with open_ledger(home, create=False) as ledger:
        h = ledger.head()
        checkpoint = ledger.checkpoint()
        data = {
            "size": h.size,
            "last_seq": h.size - 1 if h.size else None,
            "last_leaf_hash": h.last_leaf_hash.hex(),
            "root": h.root.hex(),
            "sealed_segments": h.sealed_segments,
            "checkpoint": checkpoint,
            "key_name": ledger.signer.key_name,
            "vkey": ledger.signer.verifier().vkey(),
        }
    lines = [
        f"records: {h.size}",
        f"root: {h.root.hex()}",
        f"sealed segments: {h.sealed_segments}",
        "checkpoint:",
        *("  " + line for line in checkpoint.splitlines()),
    ]
    return Outcome(0, data, lines)


def prove(args: argparse.Namespace, home: Home) -> Outcome:
    seq: int = args.seq
    if running_pid(home) is not None:
        with Client.connect(home.root) as core:
            p = core.prove_inclusion(seq)
        vkey = verifier_for(home).vkey()
        return _proof_outcome(p, vkey)
    with open_ledger(home, create=False) as ledger:
        proof = ledger.prove_inclusion(seq)
        vkey = ledger.signer.verifier().vkey()
    return _proof_outcome(proof, vkey)


def _proof_outcome(p: InclusionProof | lpb.InclusionProof, vkey: str) -> Outcome:
    data = {
        "seq": p.seq,
        "leaf_index": p.seq,
        "leaf_hash": p.leaf_hash.hex(),
        "record": p.record_body.hex(),
        "tree_size": p.tree_size,
        "root": p.root.hex(),
        "root_base64": base64.b64encode(p.root).decode(),
        "path": [h.hex() for h in p.path],
        "checkpoint": p.checkpoint,
        "public_key": p.public_key.hex(),
        "key_name": p.key_name,
        "vkey": vkey,
        "hash": "sha256; leaf = H(0x00 || record), node = H(0x01 || left || right) (RFC 9162)",
    }
    lines = [
        f"record {p.seq} of a tree of {p.tree_size}",
        f"leaf hash: {p.leaf_hash.hex()}",
        f"root: {p.root.hex()}",
        "path (leaf to root):",
        *(f"  {h.hex()}" for h in p.path),
        "checkpoint:",
        *("  " + line for line in p.checkpoint.splitlines()),
    ]
    return Outcome(0, data, lines)


def rebuild(_args: argparse.Namespace, home: Home) -> Outcome:
    _refuse_while_serving(home, "rebuild")
    path = projection_path(home)
    with open_ledger(home, create=False) as ledger:
        projection = Projection.rebuild(path, ledger, progress=Progress("rebuilding projection"))
        try:
            digest = projection.digest().hex()
            head_row = projection.head()
        finally:
            projection.close()
    applied = head_row[0] + 1 if head_row is not None else 0
    data = {"ok": True, "path": path, "records": applied, "digest": digest}
    return Outcome(0, data, [f"projection rebuilt: {applied} records, digest {digest}", path])
