"""``naga doctor`` and ``naga audit`` with the core stopped read the ledger
without opening it: run (real processes) on a read-only copy of a home
they work, and not one byte of the home changes; and ``naga audit`` reads
the jobs, skills and memory (counts, and what changed, by whom and when;
never a memory's text), the same from the running core and from the
stopped one's files.

Read-only for real: as root (which ``chmod`` does not stop) the copy is
bind-mounted read-only in a private mount namespace (``unshare -m``); as
anyone else ``chmod -R a-w`` does it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from naga.trust import TrustLevel
from naga.v1 import memory_pb2 as mmpb
from naga_core._home import Home
from naga_core._store import open_ledger
from naga_core.kernel import Actions, Kernel
from naga_core.memory import OWNER_SUBJECT, KeyRing, MemoryStore, Source
from naga_core.skills import render
from tests.daemon.conftest import REPO, core_in_thread

SECRET = "The owner's locker code is canary-7319"


def _naga(home: str, *args: str, read_only: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "naga_core.cli", *args, "--home", home]
    if read_only and os.geteuid() == 0:
        # Private mount namespace: the read-only bind mount is this child's only.
        script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
        argv = ["unshare", "-m", "sh", "-c", script, home, *argv]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        timeout=300,
        check=False,
    )


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON:\n{done.stdout}\n{done.stderr}") from None


def _fingerprint(root: str) -> dict[str, tuple[int, str]]:
    """Every path under ``root``: its mode and its content's hash."""
    out: dict[str, tuple[int, str]] = {}
    for d, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(d, name)
            st = os.lstat(path)
            digest = ""
            if os.path.isfile(path) and not os.path.islink(path):
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            out[os.path.relpath(path, root)] = (st.st_mode, digest)
    return out


def _can_mount_read_only() -> bool:
    probe = tempfile.mkdtemp(prefix="naga-ro-")
    try:
        done = subprocess.run(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                f'mount --bind -o ro "{probe}" "{probe}" && ! touch "{probe}/x"',
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return False
    else:
        return done.returncode == 0
    finally:
        shutil.rmtree(probe, ignore_errors=True)


@pytest.fixture(scope="module")
def homes() -> Iterator[tuple[str, dict[str, Any]]]:
    """A home a core ran in (a job, a skill, memory items, a forgotten
    subject), stopped; and its audit taken while the core ran."""
    root = tempfile.mkdtemp(prefix="naga-ro-")
    home = os.path.join(root, "home")
    try:
        with core_in_thread(home) as core:
            with core.client() as c:
                c.set_setting("agent.max_steps", 9)
                c.shutdown("first part done")
            assert not core.join().failed
        remember(home)
        skill = os.path.join(root, "tidy-desk")
        os.makedirs(skill)
        Path(skill, "SKILL.md").write_bytes(
            render("tidy-desk", "Tidy the owner's desk files", "Move old files to archive/.")
        )
        with core_in_thread(home) as core:
            done = _naga(home, "job", "add", "--cron", "0 7 * * *", "--prompt", "news", "--yes")
            assert done.returncode == 0, done.stdout + done.stderr
            done = _naga(home, "skill", "import", skill, "--reason", "the owner's own")
            assert done.returncode == 0, done.stdout + done.stderr
            live = _naga(home, "audit", "--json")
            assert live.returncode == 0, live.stdout + live.stderr
            with core.client() as c:
                c.shutdown("audited")
            assert not core.join().failed
        yield home, _json(live)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def remember(home: str) -> None:
    """Memory items through the store's own write path (sealed, registered
    live in the kernel), one subject then forgotten."""
    h = Home(home)
    src = Source(session="s-1", turn_id="t-1", trust=TrustLevel.OWNER)
    with open_ledger(h, create=False) as ledger:
        kernel = Kernel.open(ledger, Actions())
        store = MemoryStore.over(KeyRing.of_home(h), kernel)
        for subject, text in (
            (OWNER_SUBJECT, SECRET),
            (OWNER_SUBJECT, "The owner prefers tea"),
            ("wechat:b/alice", "Alice is the owner's sister"),
        ):
            store.write(
                ledger,
                kernel,
                subject=subject,
                layer=mmpb.MEMORY_LAYER_SEMANTIC,
                text=text,
                source=src,
            )
            ledger.commit()
        store.forget(ledger, kernel, "wechat:b/alice")
        ledger.commit()


@pytest.fixture
def read_only_copy(homes: tuple[str, dict[str, Any]]) -> Iterator[str]:
    if os.geteuid() == 0 and not _can_mount_read_only():
        pytest.skip("root without a private mount namespace: chmod cannot make a copy read-only")
    root = tempfile.mkdtemp(prefix="naga-ro-")
    copy = os.path.join(root, "home")
    shutil.copytree(homes[0], copy, symlinks=True)
    try:
        if os.geteuid() != 0:
            subprocess.run(["chmod", "-R", "a-w", copy], check=True)
        yield copy
    finally:
        subprocess.run(["chmod", "-R", "u+w", root], check=False)
        shutil.rmtree(root, ignore_errors=True)


def test_doctor_and_audit_read_a_stopped_home_without_changing_a_byte(
    read_only_copy: str,
) -> None:
    home = read_only_copy
    before = _fingerprint(home)
    doctor = _json(_naga(home, "doctor", "--json", read_only=True))
    checks = {c["name"]: c for c in doctor["checks"]}
    assert checks["ledger"]["ok"], checks["ledger"]
    assert checks["ledger"]["detail"].startswith("verified"), checks["ledger"]
    assert checks["constitution"]["ok"], checks["constitution"]
    assert checks["key files"]["ok"], checks["key files"]
    done = _naga(home, "audit", "--json", read_only=True)
    assert done.returncode == 0, done.stdout + done.stderr
    audit = _json(done)
    assert audit["core_running"] is False
    assert audit["ledger"]["ok"] is True
    assert audit["ledger"]["verified"] == "verified offline"
    assert audit["constitution"]["matches"] is True
    assert _fingerprint(home) == before
    # And the same read as root without the read-only mount, plainly: still
    # nothing written (no lock file rewritten, no debris removed).
    if os.geteuid() == 0:
        assert _naga(home, "audit", "--json").returncode == 0
        assert _naga(home, "doctor", "--json").stdout
        assert _fingerprint(home) == before


def test_audit_reads_jobs_skills_and_memory_alike_running_and_stopped(
    homes: tuple[str, dict[str, Any]], read_only_copy: str
) -> None:
    _home, live = homes
    done = _naga(read_only_copy, "audit", "--json", read_only=True)
    assert done.returncode == 0, done.stdout + done.stderr
    offline = _json(done)
    assert "canary-7319" not in done.stdout
    for report in (live, offline):
        jobs, skills, memory = report["jobs"], report["skills"], report["memory"]
        assert jobs["count"] == 1, jobs
        assert jobs["jobs"][0]["cron"] == "0 7 * * *"
        assert jobs["jobs"][0]["by"] == "owner"
        assert [c["effect"] for c in jobs["changes"]] == ["register"]
        assert jobs["changes"][0]["id"] == jobs["jobs"][0]["id"]
        assert jobs["changes"][0]["time_ns"] > 0
        assert skills["skills"] == ["global/tidy-desk"], skills
        assert skills["count"] == 1
        change = skills["changes"][-1]
        assert (change["skill"], change["by"], change["change"]) == (
            "global/tidy-desk",
            "owner",
            "create",
        ), change
        assert (memory["written"], memory["forgotten"]) == (3, 1), memory
        # Forgetting destroys a subject's key, not its items' liveness.
        assert memory["by_subject"] == {OWNER_SUBJECT: 2, "wechat:b/alice": 1}, memory
        kinds = [c["change"] for c in memory["changes"]]
        assert kinds == ["written", "written", "written", "forgotten"], memory
        assert all("text" not in c for c in memory["changes"])
    for key in ("jobs", "skills", "memory"):
        assert offline[key] == live[key], key
    lines = _naga(read_only_copy, "audit", read_only=True).stdout
    assert "jobs: 1 (0 paused)" in lines, lines
    assert "skills: 1 (0 archived)" in lines, lines
    assert "memory: 3 live items (3 written, 1 forgotten, 0 refused writes)" in lines, lines
