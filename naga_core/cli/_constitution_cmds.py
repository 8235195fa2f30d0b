"""``naga constitution show | amend FILE | restore`` (docs/design/constitution.md).

``amend`` and ``restore`` are the owner's, offline: they open the home's
ledger themselves, so the core must be stopped (nothing behind an RPC can
change the constitution, INV-5). ``show`` works either way.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Generator
from typing import Any

from naga_core import constitution
from naga_core._doctor import live_core_pid
from naga_core._home import Home
from naga_core._store import blob_store, open_ledger
from naga_core.agent import AgentConfig, StartFold
from naga_core.cli._output import Outcome
from naga_core.constitution import ConstitutionRefused, Reason
from naga_core.daemon import open_state, snapshot_store
from naga_core.errors import ConfigError
from naga_core.kernel import RATCHETS, Actions, Kernel
from naga_core.plugins import PluginHost, PluginsConfig
from naga_core.workspace import Workspace

HELP = "the rules the agent holds to: show, amend FILE (owner, core stopped), restore"


def add(sub: Any, command: Any) -> None:
    """The ``constitution`` group (``command`` is _main's parser helper)."""
    group = sub.add_parser("constitution", help=HELP)
    csub = group.add_subparsers(dest="constitution_command", required=True, metavar="ACTION")
    command(csub, "show", show, "the text, its anchor in the ledger and the last check")
    amend_p = command(csub, "amend", amend, "anchor FILE as the constitution (core stopped)")
    amend_p.add_argument("file", metavar="FILE")
    command(csub, "restore", restore, "write the anchored text back to the file (core stopped)")


def _run_dir(home: Home) -> str:
    return os.path.join(home.root, "run")


def show(_args: argparse.Namespace, home: Home) -> Outcome:
    path = constitution.path_of(home)
    running = live_core_pid(home) is not None
    checked = constitution.last_check(_run_dir(home))
    anchor_sha = checked.get("anchor", "")
    source = ""
    if not running:
        with open_ledger(home, create=False) as ledger:
            anchored = constitution.effective(constitution.anchored_in(home, ledger))
        anchor_sha, source = anchored.sha256, anchored.source
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raw, problem = b"", f"{path} cannot be read: {exc.strerror}"
    else:
        problem = ""
    found = constitution.digest(raw) if raw or not problem else ""
    matches = bool(anchor_sha) and found == anchor_sha
    data: dict[str, Any] = {
        "path": path,
        "anchor": anchor_sha,
        "source": source,
        "file_sha256": found,
        "matches": matches,
        "core_running": running,
        "last_check": checked,
        "text": raw.decode("utf-8", errors="replace"),
    }
    lines = [
        f"constitution: {path}",
        f"anchor: {anchor_sha or 'none'}" + (f" ({source})" if source else ""),
        f"file: {found or problem}",
        "matches its anchor" if matches else "DOES NOT match its anchor",
    ]
    if checked:
        ok, at = checked.get("ok", "?"), checked.get("checked_ns", "?")
        lines.append(f"last check by the core: ok={ok} at {at} ns")
    if not matches:
        lines.append("to go on: " + constitution.how_to_fix(home))
    lines += ["", data["text"].rstrip()]
    return Outcome(0 if matches else 1, data, lines)


@contextlib.contextmanager
def _offline_kernel(home: Home) -> Generator[Kernel]:
    """The home's kernel opened as the core opens it (its world actions
    installed, a snapshot used if one holds): only with the core stopped."""
    pid = live_core_pid(home)
    if pid is not None:
        raise ConfigError(
            f"naga-core is running (pid {pid}): stop it first (`naga daemon stop`); "
            "the constitution changes only offline"
        )
    blobs = blob_store(home)
    actions = Actions()
    PluginHost.discover(home, PluginsConfig()).install(actions)
    Workspace(home, blobs, lambda: "").install(actions)
    constitution.install(actions, home, blobs)
    keys = AgentConfig().keys_kept
    with open_ledger(home, create=False) as ledger:
        opened = open_state(
            ledger,
            actions,
            ratchets=RATCHETS,
            store=snapshot_store(home),
            new_fold=lambda also: StartFold(keys_kept=keys, also=also),
            keys_kept=keys,
        )
        yield opened.kernel


def amend(args: argparse.Namespace, home: Home) -> Outcome:
    src: str = args.file
    try:
        with open(src, "rb") as f:
            text = f.read(constitution.MAX_BYTES + 1)
    except OSError as exc:
        raise ConstitutionRefused(Reason.BAD_TEXT, f"cannot read {src}: {exc.strerror}") from None
    constitution.validate(text)
    sha = constitution.digest(text)
    with _offline_kernel(home) as kernel:
        before = constitution.Anchor.of(kernel.state)
        if before is not None and before.sha256 == sha:
            seq = None
        else:
            seq = constitution.anchor(
                kernel,
                blob_store(home),
                text,
                source="owner",
                why=f"amended by the owner from {os.path.abspath(src)}",
            )
    data = {"anchor": sha, "seq": seq, "path": constitution.path_of(home), "bytes": len(text)}
    said = (
        f"the constitution already is {src} (sha256 {sha}): nothing to do"
        if seq is None
        else f"constitution amended: sha256 {sha} anchored at ledger entry {seq}; "
        f"{constitution.path_of(home)} holds it; the core uses it from its next start"
    )
    return Outcome(0, data, [said])


def restore(_args: argparse.Namespace, home: Home) -> Outcome:
    with _offline_kernel(home) as kernel:
        amended = constitution.Anchor.of(kernel.state)
        anchored = constitution.effective(amended)
        before = constitution.check(home, anchored)
        if before.ok:
            data = {"anchor": anchored.sha256, "restored": False}
            return Outcome(0, data, ["the file matches its anchor: nothing to restore"])
        if amended is None:
            constitution.write_default(home)
        else:
            constitution.write_file(home, blob_store(home), anchored.sha256)
        seq = kernel.perform(
            [],
            None,
            description=f"constitution restored to its anchor {anchored.sha256} "
            f"by the owner (the file had {before.found or 'gone missing'})",
        )
    data = {"anchor": anchored.sha256, "restored": True, "seq": seq}
    return Outcome(0, data, [f"constitution restored to its anchor {anchored.sha256}"])


__all__ = ["HELP", "add", "amend", "restore", "show"]
