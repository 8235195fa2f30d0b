"""``sandbox.detect()`` against what this machine is known to offer, and its
lines for ``naga doctor``."""

from __future__ import annotations

import ctypes
import dataclasses
import os
from pathlib import Path

import sandbox

FULL = sandbox.KernelReport("6.18", True, True, 7, True, True, True, True, True)


def test_detect_matches_the_kernel() -> None:
    report = sandbox.detect()
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(..., VERSION)
    assert report.landlock_abi == max(abi, 0)
    assert report.release == os.uname().release
    assert report.root == (os.geteuid() == 0)
    assert report.no_new_privs
    assert report.seccomp
    # The launcher's own children unshare the network namespace; if it works
    # there (these tests run them), the probe must say so.
    assert report.net_namespaces


def test_detect_changes_nothing_in_this_process() -> None:
    namespaces = {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in ("net", "user")}
    status = Path("/proc/self/status")
    before = status.read_text()
    sandbox.detect()
    after = status.read_text()
    for field in ("Seccomp:", "NoNewPrivs:", "CapEff:"):
        assert [ln for ln in before.splitlines() if ln.startswith(field)] == [
            ln for ln in after.splitlines() if ln.startswith(field)
        ]
    assert namespaces == {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in namespaces}


def test_lines_name_every_feature() -> None:
    lines = FULL.lines()
    assert all(line.startswith("sandbox ") for line in lines)
    text = "\n".join(lines)
    for word in ("seccomp filter: yes", "TSYNC", "no_new_privs: yes", "ABI 7", "TCP port rules"):
        assert word in text
    assert "network namespaces: yes" in text
    assert "running as root" in text


def test_lines_say_what_an_older_kernel_lacks() -> None:
    old = dataclasses.replace(FULL, landlock_abi=3, user_namespaces=False, root=False)
    text = "\n".join(old.lines())
    assert "no TCP port rules (ABI < 4)" in text
    assert "no scopes (ABI < 6)" in text
    assert "user namespaces: no" in text
    assert "unprivileged user" in text
    none = dataclasses.replace(FULL, landlock_abi=0)
    assert "Landlock: no (file rules fall back to file modes)" in "\n".join(none.lines())
