"""Planning a launch for a kernel: which layers it gets, which are recorded
as degraded, and when the launch is refused. Kernel reports are data, so
every combination of features is generated rather than found."""

from __future__ import annotations

import dataclasses
import resource
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sandbox
from sandbox import _landlock
from sandbox._plan import plan

KERNELS = st.builds(
    sandbox.KernelReport,
    release=st.just("6.x"),
    seccomp=st.booleans(),
    seccomp_tsync=st.booleans(),
    landlock_abi=st.integers(min_value=0, max_value=8),
    no_new_privs=st.booleans(),
    net_namespaces=st.booleans(),
    user_namespaces=st.booleans(),
    root=st.booleans(),
    mount_namespaces=st.booleans(),
)
FULL = sandbox.KernelReport("6.x", True, True, 7, True, True, True, True, True)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> list[sandbox.Profile]:
    work = tmp_path_factory.mktemp("work")
    sock = str(Path(work).parent / "core.sock")
    base = [
        sandbox.Profile.gateway(sock),
        sandbox.Profile.executor(sock),
        sandbox.Profile.plugin(work_dir=None),
        sandbox.Profile.plugin(work_dir=None, egress=[sandbox.Egress("example.com", 443)]),
    ]
    bound = [p.with_work_dir(work) for p in base]
    return bound + [dataclasses.replace(p, allow_degraded=True) for p in bound]


def _degraded_layers(profile: sandbox.Profile, kernel: sandbox.KernelReport) -> set[str]:
    try:
        _, degraded = plan(
            dataclasses.replace(profile, allow_degraded=True), kernel, target="m:f", args=()
        )
    except sandbox.LayerUnavailable:
        return {"refused"}
    return {d.layer.value for d in degraded}


@settings(max_examples=200, deadline=None)
@given(kernel=KERNELS, index=st.integers(min_value=0, max_value=7))
def test_plan_for_any_kernel(
    profiles: list[sandbox.Profile], kernel: sandbox.KernelReport, index: int
) -> None:
    profile = profiles[index]
    try:
        spec, degraded = plan(profile, kernel, target="m:f", args=("a",))
    except sandbox.LayerUnavailable as e:
        missing = {layer for layer, _ in e.missing}
        # Refused: a required layer is missing, or the profile does not
        # accept degraded mode and something is missing.
        assert missing
        if kernel.seccomp and kernel.no_new_privs:
            assert not profile.allow_degraded
        else:
            assert {"seccomp", "no_new_privs"} & missing
        return
    assert kernel.seccomp
    assert kernel.no_new_privs
    assert profile.allow_degraded or not degraded
    assert (spec.target, list(spec.args)) == ("m:f", ["a"])
    assert spec.drop_capabilities
    assert spec.seccomp.tsync == kernel.seccomp_tsync
    assert [r.syscall for r in spec.seccomp.rules] == [r.syscall for r in profile.seccomp.rules]
    assert (resource.RLIMIT_CORE, 0, 0) in [(r.resource, r.soft, r.hard) for r in spec.rlimits]
    layers = {d.layer for d in degraded}
    assert (sandbox.Layer.SECCOMP_TSYNC in layers) == (not kernel.seccomp_tsync)

    private = profile.network.private_netns
    assert spec.unshare_net == (private and kernel.net_namespaces)
    assert spec.HasField("view") == kernel.mount_namespaces
    assert spec.unshare_user == (not kernel.root and (spec.unshare_net or spec.HasField("view")))
    assert (sandbox.Layer.NET_NAMESPACE in layers) == (private and not kernel.net_namespaces)
    assert (sandbox.Layer.MOUNT_NAMESPACE in layers) == (not kernel.mount_namespaces)
    if kernel.mount_namespaces:
        assert spec.view.cwd == profile.work_dir
        writable = {p.path for p in spec.view.paths if p.writable}
        read_only = {p.path for p in spec.view.paths if not p.writable}
        core: set[str] = {profile.core_socket} if profile.core_socket else set()
        assert writable == {profile.work_dir, *profile.devices, *core}
        assert read_only == set(profile.read_only)

    abi = kernel.landlock_abi
    assert spec.HasField("landlock") == (abi > 0)
    assert (sandbox.Layer.LANDLOCK_FS in layers) == (abi < 3)
    assert (sandbox.Layer.LANDLOCK_NET in layers) == (not private and abi < 4)
    assert (sandbox.Layer.LANDLOCK_SCOPE in layers) == (not private and abi < 6)
    if abi > 0:
        landlock = spec.landlock
        assert landlock.handled_fs == _landlock.fs_access_for_abi(abi)
        assert all(p.access & ~landlock.handled_fs == 0 for p in landlock.paths)
        writable = [p.path for p in landlock.paths if p.access & _landlock.FS_WRITE_FILE]
        assert writable == [*profile.devices, profile.work_dir]
        assert bool(landlock.handled_net) == (abi >= 4)
        assert bool(landlock.scoped) == (abi >= 6)
        if abi >= 4:
            assert list(landlock.bind_ports) == list(profile.bind_ports)
            assert list(landlock.connect_ports) == list(profile.connect_ports)


@settings(max_examples=150, deadline=None)
@given(
    weaker=KERNELS,
    gains=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
    abi_gain=st.integers(min_value=0, max_value=8),
    index=st.integers(min_value=0, max_value=3),
)
def test_more_kernel_features_never_degrade_more(
    profiles: list[sandbox.Profile],
    weaker: sandbox.KernelReport,
    gains: tuple[bool, bool, bool, bool],
    abi_gain: int,
    index: int,
) -> None:
    stronger = dataclasses.replace(
        weaker,
        seccomp=weaker.seccomp or gains[0],
        seccomp_tsync=weaker.seccomp_tsync or gains[1],
        no_new_privs=weaker.no_new_privs or gains[2],
        net_namespaces=weaker.net_namespaces or gains[3],
        mount_namespaces=weaker.mount_namespaces or gains[3],
        landlock_abi=weaker.landlock_abi + abi_gain,
    )
    before = _degraded_layers(profiles[index], weaker)
    after = _degraded_layers(profiles[index], stronger)
    assert "refused" in before or after <= before


def test_full_kernel_degrades_nothing(profiles: list[sandbox.Profile]) -> None:
    for profile in profiles:
        _, degraded = plan(profile, FULL, target="m:f", args=())
        assert degraded == ()


def test_refusal_names_every_missing_layer(profiles: list[sandbox.Profile]) -> None:
    old = dataclasses.replace(
        FULL, landlock_abi=0, seccomp_tsync=False, net_namespaces=False, mount_namespaces=False
    )
    with pytest.raises(sandbox.LayerUnavailable) as info:
        plan(profiles[1], old, target="m:f", args=())
    assert [layer for layer, _ in info.value.missing] == [
        "seccomp_tsync",
        "net_namespace",
        "mount_namespace",
        "landlock_fs",
    ]
    assert "allow_degraded=True" in str(info.value)
