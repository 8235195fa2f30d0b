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
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sandbox
from naga_core.ledger import BlobStore, OsFileSystem
from naga_core.workspace import ShellRunner, apply, capture, tree_hash

PATHS = ["a", "b", "b/x", "b/y", "c", "d", "d/e", "d/e/f"]
TEXT = st.text(alphabet="xyz", min_size=0, max_size=6)
#: ``cp -r {p} {q}``, but never a directory into itself. GNU cp refuses that
#: only once it has copied part of it: it reads each directory's entries
#: sorted by inode number and stops at the first that is a directory it made
#: itself (coreutils copy_dir, gnulib savedir's SAVEDIR_SORT_FASTREAD), so
#: ``cp -r d d/e`` copies d/e/f into d/e/d/e only if d/e/f's inode number is
#: below the new d/e/d's. That is not a function of the tree: the direct
#: run's tree and the staged ones share no inode numbers, and ext4 may hand
#: a new directory a freed number below older files' (on a busy ext4 disk:
#: 71 direct runs in 2,000, 22 staged copies in 150; tmpfs never reuses
#: one). No oracle holds for it, so the op leaves it out: where the
#: destination resolves inside the source directory it fails as cp would,
#: having written nothing.
COPY = (
    'if [ -d {p} ] && ! [ -L {p} ] && case "$(realpath -m -- {q})/" in'
    ' "$(realpath -- {p})"/*) true;; *) false;; esac; then false; else cp -r {p} {q}; fi'
)
OPS = [
    "mkdir -p {p}",
    "echo {t} > {p}",
    "echo {t} >> {p}",
    "rm -rf {p}",
    "ln -sfn {q} {p}",
    "ln {p} {q}",
    "mv {p} {q}",
    "mv -T {p} {q}",
    COPY,
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


def _command(*ops: tuple[str, str, str, str]) -> str:
    """One shell command of ops (template, p, q, text), each one's errors
    dropped, the whole one succeeding."""
    return (
        "; ".join(op.format(p=p, q=q, t=t or "e") + " 2>/dev/null" for op, p, q, t in ops)
        + "; true"
    )


@st.composite
def commands(draw: st.DrawFn) -> str:
    ops: list[tuple[str, str, str, str]] = []
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(OPS))
        p, q = draw(st.sampled_from(PATHS)), draw(st.sampled_from(PATHS))
        ops.append((op, p, q, draw(TEXT)))
    return _command(*ops)


def _direct(root: str, command: str) -> str:
    # Without capabilities, as in the sandbox: root's DAC override would
    # let a command through a directory it took the search bit off.
    prefix = ["setpriv", "--bounding-set=-all"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, "/bin/sh", "-c", command], cwd=root, check=True, timeout=30, env={})
    return tree_hash(root)


def _staged(root: str, stage: str, blobs: BlobStore, command: str, *, overlay: bool) -> str:
    with sandbox.Forker() as forker:  # per example: a hypothesis test takes no fixture
        runner = ShellRunner(stage, KERNEL, forker=forker, overlay=overlay)
        outcome = runner.run(root, ["/bin/sh", "-c", command], 30.0)
    assert outcome.exit_code == 0, outcome.output
    assert runner.copy_because is None if overlay else True, runner.copy_because
    captured = capture(root, blobs, outcome.staged)
    if captured is not None:
        apply(root, blobs, captured.do)
    return tree_hash(root)


KERNEL = sandbox.detect()


@pytest.mark.slow  # two sandboxed commands an example
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(command=commands())
# CI's failure: the staged copy's cp met d/e/d before d/e/f (see COPY).
@example(command=_command(("ln -sfn {q} {p}", "b", "b/y", ""), (COPY, "d", "d/e", "")))
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


def _seeded(tmp_path: Path, setup: str) -> str:
    root = str(tmp_path / "root")
    _seed(root)
    if setup:
        _direct(root, setup)
    return root


@pytest.mark.parametrize(
    ("setup", "p", "q"),
    [
        ("", "d", "d/e"),  # into a directory of its own: d/e/d
        ("", "d", "d"),  # into itself: d/d
        ("", "b", "b/y"),  # to a new path inside itself
        ("ln -sfn d c", "d", "c"),  # through a symlink to itself: d/d
    ],
)
def test_a_directory_is_never_copied_into_itself(
    tmp_path: Path, setup: str, p: str, q: str
) -> None:
    """What such a copy leaves depends on inode numbers (see COPY): the op
    must leave the tree as it was, whatever order cp would read it in."""
    root = _seeded(tmp_path, setup)
    before = tree_hash(root)
    assert _direct(root, _command((COPY, p, q, ""))) == before


@pytest.mark.parametrize(
    ("p", "q", "made"),
    [("d", "b", "b/d/e/f"), ("b", "d/e", "d/e/b/x"), ("d/e", "b/y", "b/y/f"), ("b/x", "d", "d/x")],
)
def test_other_copies_are_made(tmp_path: Path, p: str, q: str, made: str) -> None:
    root = _seeded(tmp_path, "")
    _direct(root, _command((COPY, p, q, "")))
    assert os.path.isfile(os.path.join(root, made))
