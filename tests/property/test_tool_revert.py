"""The pieces the start's undo of an interrupted tool call stands on
(docs/adr/0033-recover13-tool-undo.md), over random trees and writes: a
captured workspace effect journaled through a real kernel leaves the tree
holding its ``do`` set; ``Kernel.revert`` of it brings back exactly the
tree before (its ``undo`` set holds again, the tree hash is the one before);
and once anything the effect wrote changes, neither set holds (the start
then refuses to undo)."""

from __future__ import annotations

import base64
import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from naga_core._home import Home
from naga_core._store import blob_store
from naga_core.kernel import Actions, Kernel
from naga_core.ledger import Ledger
from naga_core.workspace import Workspace, tree_hash
from tests.ledger_helpers import fixed_signer

PATHS = ["a", "b", "d/x", "d/y", "d/e/z"]
TEXT = st.binary(min_size=0, max_size=16)


def _seed(root: str, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if not os.path.isdir(full):
            with open(full, "wb") as f:
                f.write(data)


@settings(max_examples=40, deadline=None)
@given(
    before=st.dictionaries(st.sampled_from(["a", "b", "d/x"]), TEXT, max_size=3),
    writes=st.dictionaries(st.sampled_from(PATHS), TEXT, min_size=1, max_size=4),
    deletes=st.sets(st.sampled_from(["a", "b", "d/x"]), max_size=2),
)
def test_revert_of_a_captured_effect_restores_the_tree(
    before: dict[str, bytes], writes: dict[str, bytes], deletes: set[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(os.path.join(tmp, "home"))
        os.makedirs(home.root)
        workspace = Workspace(home, blob_store(home), lambda: "")
        root = workspace.root
        _seed(root, before)
        initial = tree_hash(root)
        actions = Actions()
        workspace.install(actions)
        with Ledger.open(home.ledger_dir, fixed_signer()) as ledger:
            kernel = Kernel.open(ledger, actions)
            result: dict[str, object] = {
                "writes": [{"path": p, "content_b64": _b64(d)} for p, d in writes.items()],
                "deletes": sorted(p for p in deletes if p in before and p not in writes),
            }
            staged = workspace.staged_from_result(result)
            captured = workspace.capture(staged)
            if captured is None:
                assert tree_hash(root) == initial
                return
            seq = workspace.journal(kernel, captured, description="a tool call")
            effect = kernel.effect_at(seq)
            assert effect is not None
            do, undo = effect.do[0], effect.undo[0]
            assert workspace.holds(do)
            assert not workspace.holds(undo)
            written = tree_hash(root)
            undone = kernel.revert(seq, description="undo of the tool call")
            assert tree_hash(root) == initial
            assert workspace.holds(undo)
            # Applied again, then changed by someone else: neither set holds.
            kernel.revert(undone, description="redo")  # the revert's own inverse
            assert tree_hash(root) == written
            files = [e.path for e in captured.do.entries if e.blob]  # files it wrote
            if not files:
                return
            with open(os.path.join(root, files[0]), "ab") as f:
                f.write(b"+later")
            assert not workspace.holds(do)
            assert not workspace.holds(undo)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
