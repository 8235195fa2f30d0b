"""cgroup detection and limits on hosts this machine is not: a cgroup v2
host with a delegated subtree (this one has cpu and memory on v1 only), and
a v1 host with its pids hierarchy, through the ``CgroupHost`` seam (its
mountinfo, its /proc/self/cgroup and the root its mounts are under point
into a tree of the test's own). What the kernel does with the files is
tested on the real v1 hierarchies (tests/tools/test_shell_cgroup.py,
tests/plugin_host/test_cgroups.py); here, which files get which values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sandbox

_OWN_V2 = "/user.slice/naga.service"


def _file(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _v2_host(tmp: Path, controllers: str) -> sandbox.CgroupHost:
    _file(
        tmp / "mountinfo",
        "25 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4"
        " - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
    )
    _file(tmp / "cgroup", f"0::{_OWN_V2}\n")
    base = tmp / "root" / "sys" / "fs" / "cgroup" / _OWN_V2.lstrip("/")
    _file(base / "cgroup.controllers", controllers + "\n")
    _file(base / "cgroup.subtree_control")
    return sandbox.CgroupHost(str(tmp / "mountinfo"), str(tmp / "cgroup"), str(tmp / "root"))


def test_v2_delegated_subtree_with_pids(tmp_path: Path) -> None:
    host = _v2_host(tmp_path, "cpuset cpu io memory pids")
    support = sandbox.detect_cgroups(host)
    base = tmp_path / "root" / "sys" / "fs" / "cgroup" / _OWN_V2.lstrip("/")
    parent = str(base / "naga")
    assert (support.version, support.cpu_parent, support.memory_parent, support.pids_parent) == (
        sandbox.CgroupVersion.V2,
        parent,
        parent,
        parent,
    ), support
    assert "task count" in support.line()
    # Enabled for the own cgroup's children, then for the naga parent's.
    assert (base / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (base / "naga" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"

    limits = sandbox.CgroupLimits(cpus=0.5, memory_bytes=64 << 20, nice=10, pids=64)
    group = sandbox.Cgroup.create(support, "shell", limits)
    (d,) = group.dirs
    assert os.path.dirname(d) == parent
    assert os.path.basename(d).startswith("naga-shell-")
    assert group.pids_dir == d
    written = {name: Path(d, name).read_text() for name in sorted(os.listdir(d))}
    assert written == {
        "cpu.max": "50000 100000",
        "cpu.weight.nice": "10",
        "memory.max": str(64 << 20),
        "memory.swap.max": "0",
        "pids.max": "64",
    }
    group.add(4242)
    assert Path(d, "cgroup.procs").read_text() == "4242"
    assert group.pids() == [4242]
    assert group.memory_limit() == 64 << 20


def test_v2_without_pids_sets_no_task_count(tmp_path: Path) -> None:
    support = sandbox.detect_cgroups(_v2_host(tmp_path, "cpu memory"))
    assert support.version is sandbox.CgroupVersion.V2
    assert support.pids_parent is None
    assert "task count" not in support.line()
    group = sandbox.Cgroup.create(support, "shell", sandbox.CgroupLimits(pids=64))
    assert group.pids_dir is None
    assert not Path(group.dirs[0], "pids.max").exists()


def test_v2_with_cpu_and_memory_bound_to_v1_falls_back(tmp_path: Path) -> None:
    # This machine: the cgroup2 mount offers hugetlb alone.
    support = sandbox.detect_cgroups(_v2_host(tmp_path, "hugetlb"))
    assert support.version is sandbox.CgroupVersion.NONE
    assert "offers hugetlb here, not cpu and memory" in support.reason


@pytest.mark.parametrize("with_pids", [True, False])
def test_v1_hierarchies_with_and_without_pids(tmp_path: Path, with_pids: bool) -> None:
    controllers = ["cpu,cpuacct", "memory"] + (["pids"] if with_pids else [])
    lines = [
        f"{30 + i} 25 0:{40 + i} / /sys/fs/cgroup/{c} rw,nosuid shared:{i} - cgroup cgroup rw,{c}"
        for i, c in enumerate(controllers)
    ]
    _file(tmp_path / "mountinfo", "\n".join(lines) + "\n")
    _file(
        tmp_path / "cgroup",
        "".join(f"{i + 1}:{c}:/\n" for i, c in enumerate(controllers)),
    )
    for c in controllers:
        (tmp_path / "root" / "sys" / "fs" / "cgroup" / c).mkdir(parents=True)
    host = sandbox.CgroupHost(
        str(tmp_path / "mountinfo"), str(tmp_path / "cgroup"), str(tmp_path / "root")
    )
    support = sandbox.detect_cgroups(host)
    cg = tmp_path / "root" / "sys" / "fs" / "cgroup"
    assert support.version is sandbox.CgroupVersion.V1, support
    assert (support.cpu_parent, support.memory_parent) == (
        str(cg / "cpu,cpuacct"),
        str(cg / "memory"),
    )
    assert support.pids_parent == (str(cg / "pids") if with_pids else None)

    limits = sandbox.CgroupLimits(cpus=1.0, memory_bytes=1 << 30, nice=10, pids=256)
    group = sandbox.Cgroup.create(support, "shell", limits)
    cpu, memory = group.dirs[:2]
    assert Path(cpu, "cpu.cfs_quota_us").read_text() == "100000"
    assert Path(cpu, "cpu.cfs_period_us").read_text() == "100000"
    # v1 keeps its default weight (ADR 0031, 0035): nothing of nice is written.
    assert not Path(cpu, "cpu.shares").exists()
    assert Path(memory, "memory.limit_in_bytes").read_text() == str(1 << 30)
    # No swap past the ceiling: memory+swap capped at the same figure.
    assert Path(memory, "memory.memsw.limit_in_bytes").read_text() == str(1 << 30)
    if with_pids:
        assert group.pids_dir is not None
        assert len(group.dirs) == 3
        assert Path(group.pids_dir, "pids.max").read_text() == "256"
    else:
        assert (group.pids_dir, len(group.dirs)) == (None, 2)


def test_a_task_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="pids"):
        sandbox.CgroupLimits(pids=0)


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(child.stdout)


def test_a_sweep_removes_only_the_empty_groups_of_gone_makers(tmp_path: Path) -> None:
    cpu, memory = tmp_path / "cpu", tmp_path / "memory"
    dead, alive = _dead_pid(), os.getpid()
    stale = [f"naga-shell-p{dead}-aaaa", f"naga-local-model-p{dead}-bbbb", "naga-gateway-cccc"]
    kept = [f"naga-shell-p{alive}-dddd", "unrelated"]
    for parent in (cpu, memory):
        for name in stale + kept:
            (parent / name).mkdir(parents=True)
    # A group still holding a task refuses rmdir; a non-empty directory
    # stands in for it here (the real refusal is tests/plugin_host's).
    (cpu / f"naga-shell-p{dead}-eeee").mkdir()
    _file(cpu / f"naga-shell-p{dead}-eeee" / "task")
    support = sandbox.CgroupSupport(
        sandbox.CgroupVersion.V1, cpu_parent=str(cpu), memory_parent=str(memory)
    )
    assert sandbox.sweep_stale_cgroups(support) == 2 * len(stale)
    assert sorted(os.listdir(cpu)) == sorted([*kept, f"naga-shell-p{dead}-eeee"])
    assert sorted(os.listdir(memory)) == sorted(kept)
    assert sandbox.sweep_stale_cgroups(sandbox.CgroupSupport(sandbox.CgroupVersion.NONE)) == 0


def test_a_new_group_is_named_with_its_maker(tmp_path: Path) -> None:
    cpu, memory = tmp_path / "cpu", tmp_path / "memory"
    cpu.mkdir()
    memory.mkdir()
    support = sandbox.CgroupSupport(
        sandbox.CgroupVersion.V1, cpu_parent=str(cpu), memory_parent=str(memory)
    )
    group = sandbox.Cgroup.create(support, "local-model", sandbox.CgroupLimits())
    name = os.path.basename(group.dirs[0])
    assert name.startswith(f"naga-local-model-p{os.getpid()}-"), name
    assert sandbox.sweep_stale_cgroups(support) == 0  # its maker lives
    assert os.listdir(cpu) == [name]
