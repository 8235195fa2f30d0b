"""The staging overlay against the command itself: random shell commands
(files, directories, symlinks, hard links, renames, modes) run in the real
sandbox over a workspace with their writes staged in an overlay, the staged
writes captured and applied, give the very tree the same command gives run
directly on a copy of that workspace; and so does the staged copy (ADR
0034). A difference is a write the capture lost or invented."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sandbox
from naga_core.ledger import BlobStore, OsFileSystem
from naga_core.workspace import ShellRunner, apply, capture, tree_hash

pytestmark = pytest.mark.slow  # two sandboxed commands an example

PATHS = ["a", "b", "b/x", "b/y", "c", "d", "d/e", "d/e/f"]
TEXT = st.text(alphabet="xyz", min_size=0, max_size=6)
OPS = [
    "mkdir -p {p}",
    "echo {t} > {p}",
    "echo {t} >> {p}",
    "rm -rf {p}",
    "ln -sfn {q} {p}",
    "ln {p} {q}",
    "mv {p} {q}",
    "mv -T {p} {q}",
    "cp -r {p} {q}",
    "chmod +x {p}",
    "chmod -x {p}",
    "touch {p}",
    "rm -f {p}; mkdir {p} && echo {t} > {p}/n",
    "(exec 3>>{p} && echo {t} >&3)",
]


def _seed(root: str) -> None:
    os.makedirs(os.path.join(root, "b"))
    os.makedirs(os.path.join(root, "d", "e"))
    for rel, text in (("a", "a\n"), ("b/x", "x\n"), ("d/e/f", "f\n")):
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    os.chmod(os.path.join(root, "b", "x"), 0o755)
    os.symlink("a", os.path.join(root, "c"))


@st.composite
def commands(draw: st.DrawFn) -> str:
    ops: list[str] = []
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(OPS))
        p, q = draw(st.sampled_from(PATHS)), draw(st.sampled_from(PATHS))
        ops.append(op.format(p=p, q=q, t=draw(TEXT) or "e") + " 2>/dev/null")
    return "; ".join(ops) + "; true"


def _direct(root: str, command: str) -> str:
    # Without capabilities, as in the sandbox: root's DAC override would
    # let a command through a directory it took the search bit off.
    prefix = ["setpriv", "--bounding-set=-all"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, "/bin/sh", "-c", command], cwd=root, check=True, timeout=30, env={})
    return tree_hash(root)


def _staged(root: str, stage: str, blobs: BlobStore, command: str, *, overlay: bool) -> str:
    runner = ShellRunner(stage, KERNEL, overlay=overlay)
    outcome = runner.run(root, ["/bin/sh", "-c", command], 30.0)
    assert outcome.exit_code == 0, outcome.output
    assert runner.copy_because is None if overlay else True, runner.copy_because
    captured = capture(root, blobs, outcome.staged)
    if captured is not None:
        apply(root, blobs, captured.do)
    return tree_hash(root)


KERNEL = sandbox.detect()


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(command=commands())
def test_captured_writes_are_what_the_command_does(command: str) -> None:
    base = tempfile.mkdtemp(prefix="naga-stage-prop-")
    try:
        blobs = BlobStore(OsFileSystem(), os.path.join(base, "blobs"))
        roots = {name: os.path.join(base, name) for name in ("direct", "overlay", "copy")}
        for root in roots.values():
            _seed(root)
        expected = _direct(roots["direct"], command)
        got = _staged(roots["overlay"], os.path.join(base, "s1"), blobs, command, overlay=True)
        assert got == expected, command
        got = _staged(roots["copy"], os.path.join(base, "s2"), blobs, command, overlay=False)
        assert got == expected, command
    finally:
        for entry, dirs, _ in os.walk(base):
            for d in dirs:
                os.chmod(os.path.join(entry, d), 0o700)
        shutil.rmtree(base, ignore_errors=True)
