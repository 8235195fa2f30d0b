"""Profiles per process kind, and the bad input they refuse."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

import pytest

import sandbox
from sandbox._profile import NETWORK_READ_ONLY, source_root


def test_gateway_serves_a_handed_socket_and_has_no_network_of_its_own(tmp_path: Path) -> None:
    profile = sandbox.Profile.gateway(tmp_path / "core.sock")
    assert profile.kind is sandbox.Kind.GATEWAY
    assert profile.network is sandbox.NetworkPolicy.ACCEPT
    assert profile.network.private_netns
    assert (profile.bind_ports, profile.connect_ports) == ((), ())
    assert profile.core_socket == str(tmp_path / "core.sock")
    assert profile.work_dir is None
    assert profile.rlimits.cpu_seconds is None  # long-running: no CPU budget
    assert not set(profile.read_only) & set(NETWORK_READ_ONLY)  # nothing to resolve


def test_executor_has_no_network(tmp_path: Path) -> None:
    profile = sandbox.Profile.executor(tmp_path / "core.sock", work_dir=tmp_path)
    assert profile.network is sandbox.NetworkPolicy.CORE_ONLY
    assert profile.network.private_netns
    assert (profile.bind_ports, profile.connect_ports) == ((), ())
    assert profile.work_dir == str(tmp_path.resolve())
    assert not set(profile.read_only) & set(NETWORK_READ_ONLY)


def test_plugin_network_follows_its_manifest(tmp_path: Path) -> None:
    quiet = sandbox.Profile.plugin(work_dir=tmp_path)
    assert quiet.network is sandbox.NetworkPolicy.NONE
    core = sandbox.Profile.plugin(work_dir=tmp_path, core_socket="/run/naga/core.sock")
    assert core.network is sandbox.NetworkPolicy.CORE_ONLY
    egress = sandbox.Profile.plugin(
        work_dir=tmp_path,
        egress=[
            sandbox.Egress("ilinkai.weixin.qq.com", 443),
            sandbox.Egress("api.deepseek.com", 443),
            sandbox.Egress("localhost", 11434),
        ],
    )
    assert egress.network is sandbox.NetworkPolicy.EGRESS
    assert egress.connect_ports == (443, 11434)
    assert egress.egress_hosts == ("ilinkai.weixin.qq.com", "api.deepseek.com", "localhost")


def test_read_only_paths_cover_python_and_source_but_not_secrets(tmp_path: Path) -> None:
    profile = sandbox.Profile.plugin(work_dir=tmp_path)
    assert sys.prefix in profile.read_only or os.path.realpath(sys.prefix) in profile.read_only
    assert sys.base_prefix in profile.read_only
    assert source_root() in profile.read_only
    for secret in ("/", "/etc", "/proc", "/root", "/home", "/tmp", "/etc/passwd", "/etc/shadow"):
        assert secret not in profile.read_only
    assert all(os.path.isabs(p) and os.path.exists(p) for p in profile.read_only)
    assert profile.devices == ("/dev/null",)


def test_work_dir_binds_once(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    profile = sandbox.Profile.plugin(work_dir=first)
    assert profile.with_work_dir(first) == profile
    with pytest.raises(sandbox.ProfileInvalid, match="already has the work directory"):
        profile.with_work_dir(second)


@pytest.mark.parametrize(
    "work_dir",
    ["/", "/usr", "/usr/lib", sys.prefix, source_root(), str(Path(source_root()) / "sandbox")],
)
def test_work_dir_overlapping_read_only_paths_is_refused(work_dir: str) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match="overlaps the read-only path"):
        sandbox.Profile.plugin(work_dir=work_dir)


def test_work_dir_must_be_an_existing_absolute_directory(tmp_path: Path) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match="must be absolute"):
        sandbox.Profile.plugin(work_dir="relative/dir")
    with pytest.raises(sandbox.ProfileInvalid, match="does not exist"):
        sandbox.Profile.plugin(work_dir=tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(sandbox.ProfileInvalid, match="not a directory"):
        sandbox.Profile.plugin(work_dir=tmp_path / "file")
    with pytest.raises(sandbox.ProfileInvalid, match="must be a path"):
        sandbox.Profile.plugin(work_dir="")


@pytest.mark.parametrize("port", [0, -1, 65536, True, 80.0, "80"])
def test_bad_ports_are_refused(port: object) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match=r"1\.\.65535"):
        sandbox.Egress("example.com", port)  # type: ignore[arg-type]


@pytest.mark.parametrize("host", ["", "two words", "a" * 254, "tab\there"])
def test_bad_egress_hosts_are_refused(host: str) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match="egress host"):
        sandbox.Egress(host, 443)


def test_other_bad_profile_input(tmp_path: Path) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match="core socket must be absolute"):
        sandbox.Profile.executor("run/core.sock")
    with pytest.raises(sandbox.ProfileInvalid, match="read-only path does not exist"):
        sandbox.Profile.plugin(work_dir=tmp_path, read_only=["/no/such/dir"])
    with pytest.raises(sandbox.ProfileInvalid, match="read-only path must be absolute"):
        sandbox.Profile.plugin(work_dir=tmp_path, read_only=["lib"])
    with pytest.raises(sandbox.ProfileInvalid, match="egress entries must be Egress"):
        sandbox.Profile.plugin(work_dir=tmp_path, egress=[("example.com", 443)])  # type: ignore[list-item]
    with pytest.raises(sandbox.ProfileInvalid, match="rlimits must be Rlimits"):
        sandbox.Profile.plugin(work_dir=tmp_path, rlimits={"cpu_seconds": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -5, 1.5, True, "10"])
def test_bad_rlimits_are_refused(value: object) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match="cpu_seconds must be a positive integer"):
        sandbox.Rlimits(cpu_seconds=value)  # type: ignore[arg-type]


def test_rlimit_triples() -> None:
    limits = sandbox.Rlimits(
        address_space=1 << 30, cpu_seconds=5, open_files=64, file_size=1 << 20, processes=100
    )
    assert limits.triples() == [
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_AS, 1 << 30, 1 << 30),
        (resource.RLIMIT_CPU, 5, 6),
        (resource.RLIMIT_NOFILE, 64, 64),
        (resource.RLIMIT_FSIZE, 1 << 20, 1 << 20),
        (resource.RLIMIT_NPROC, 100, 100),
    ]
    # Unset limits are inherited, but core dumps are always off.
    assert sandbox.Rlimits().triples() == [(resource.RLIMIT_CORE, 0, 0)]
