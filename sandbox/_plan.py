"""Turn a profile into the child's :class:`SandboxSpec` for one kernel, and
say which layers this kernel cannot give (:class:`Degradation`).

Seccomp and no_new_privs are never optional: without them there is no
sandbox, only a subprocess, so a kernel lacking them is refused even in
degraded mode. Everything else (TSYNC, namespaces, each Landlock feature)
may be missing when the profile allows degraded mode, and is then recorded.
"""

from __future__ import annotations

import resource
from collections.abc import Sequence
from dataclasses import dataclass

from naga.v1 import sandbox_pb2
from sandbox import _landlock
from sandbox._detect import KernelReport
from sandbox._profile import Profile
from sandbox._wire import Layer, seccomp_to_proto
from sandbox.errors import LayerUnavailable

_RLIM_INFINITY_WIRE = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Degradation:
    """A layer the profile wants and this kernel cannot give, and what that leaves open."""

    layer: Layer
    reason: str

    def __str__(self) -> str:
        return f"{self.layer.value}: {self.reason}"


def _rlim(value: int) -> int:
    return _RLIM_INFINITY_WIRE if value == resource.RLIM_INFINITY else value


def _degradations(profile: Profile, kernel: KernelReport) -> list[Degradation]:
    found: list[Degradation] = []
    if not kernel.seccomp_tsync:
        found.append(
            Degradation(
                Layer.SECCOMP_TSYNC,
                "no SECCOMP_FILTER_FLAG_TSYNC; the child refuses to start if its target "
                "left other threads running when the filter loads",
            )
        )
    if profile.network.private_netns and not kernel.net_namespaces:
        found.append(
            Degradation(
                Layer.NET_NAMESPACE,
                "cannot create a network namespace"
                + ("" if kernel.root else " (no unprivileged user namespaces)")
                + "; the host network stays visible, though seccomp still allows only "
                "Unix sockets",
            )
        )
    if not kernel.mount_namespaces:
        found.append(
            Degradation(
                Layer.MOUNT_NAMESPACE,
                "cannot create a mount namespace; the host's paths stay visible (Landlock "
                "still refuses their contents) and Unix sockets outside the profile (a "
                "systemd user bus, ssh-agent, docker.sock) stay reachable by file mode"
                + (
                    "; and the declared egress hosts cannot be shown to it in an /etc/hosts"
                    " of its own, so only addresses (not names) can be connected to"
                    if not profile.network.private_netns
                    else ""
                ),
            )
        )
    abi = kernel.landlock_abi
    if abi == 0:
        found.append(
            Degradation(
                Layer.LANDLOCK_FS,
                "no Landlock; files are protected by their modes only",
            )
        )
    elif abi < 3:
        found.append(
            Degradation(
                Layer.LANDLOCK_FS,
                f"Landlock ABI {abi} cannot refuse truncate() of read-only files",
            )
        )
    host_network = not profile.network.private_netns
    if host_network and abi < 4:
        found.append(
            Degradation(
                Layer.LANDLOCK_NET,
                f"Landlock ABI {abi} has no TCP port rules; every TCP port can be connected to",
            )
        )
    if host_network and abi < 6:
        found.append(
            Degradation(
                Layer.LANDLOCK_SCOPE,
                f"Landlock ABI {abi} cannot scope abstract Unix sockets; the host's are "
                "reachable (signals stay limited by seccomp)",
            )
        )
    return found


def plan(
    profile: Profile,
    kernel: KernelReport,
    *,
    target: str,
    args: Sequence[str],
    view_files: Sequence[tuple[str, bytes]] = (),
) -> tuple[sandbox_pb2.SandboxSpec, tuple[Degradation, ...]]:
    """The spec for the child and what it lacks; raises :class:`LayerUnavailable`
    when a required layer is missing (always for seccomp and no_new_privs).
    ``view_files`` (path, content) are made in the view's root, readable;
    without a mount namespace there is no view to make them in."""
    if profile.work_dir is None:
        raise ValueError("plan() needs a profile with its work directory bound")
    hard_missing: list[tuple[str, str]] = []
    if not kernel.seccomp:
        hard_missing.append(
            (Layer.SECCOMP.value, "no seccomp filter mode with SECCOMP_RET_KILL_PROCESS")
        )
    if not kernel.no_new_privs:
        hard_missing.append((Layer.NO_NEW_PRIVS.value, "PR_SET_NO_NEW_PRIVS unsupported"))
    if profile.overlay is not None and not kernel.mount_namespaces:
        hard_missing.append(
            (Layer.MOUNT_NAMESPACE.value, "the staging overlay needs a mount namespace")
        )
    degraded = _degradations(profile, kernel)
    if hard_missing or (degraded and not profile.allow_degraded):
        missing = hard_missing + [(d.layer.value, d.reason) for d in degraded]
        raise LayerUnavailable(profile.name, missing)

    spec = sandbox_pb2.SandboxSpec(
        target=target,
        args=list(args),
        drop_capabilities=True,
        seccomp=seccomp_to_proto(profile.seccomp, tsync=kernel.seccomp_tsync),
    )
    spec.nice = profile.nice
    for res, soft, hard in profile.rlimits.triples():
        spec.rlimits.append(sandbox_pb2.Rlimit(resource=res, soft=_rlim(soft), hard=_rlim(hard)))
    spec.unshare_net = profile.network.private_netns and kernel.net_namespaces
    if kernel.mount_namespaces:
        view = sandbox_pb2.FilesystemView(cwd=profile.work_dir)
        shown = [(p, False) for p in profile.read_only]
        shown += [(p, True) for p in profile.devices]
        shown.append((profile.work_dir, profile.scratch_dir is None))
        if profile.scratch_dir is not None:
            shown.append((profile.scratch_dir, True))
        if profile.core_socket is not None:
            shown.append((profile.core_socket, True))
        if profile.egress_socket is not None:
            shown.append((profile.egress_socket, True))
        view.paths.extend(sandbox_pb2.ViewPath(path=p, writable=w) for p, w in shown)
        if profile.overlay is not None:
            o = profile.overlay
            view.overlays.append(
                sandbox_pb2.OverlayMount(
                    lower=o.lower, upper=o.upper, work=o.work, target=profile.work_dir
                )
            )
        view.files.extend(sandbox_pb2.ViewFile(path=p, content=c) for p, c in view_files)
        spec.view.CopyFrom(view)
    # Without root, namespaces other than the user one need one of their own.
    spec.unshare_user = not kernel.root and (spec.unshare_net or spec.HasField("view"))
    abi = kernel.landlock_abi
    if abi > 0:
        handled_fs = _landlock.fs_access_for_abi(abi)
        landlock = sandbox_pb2.LandlockSpec(
            handled_fs=handled_fs,
            handled_net=_landlock.net_access_for_abi(abi),
            scoped=_landlock.scopes_for_abi(abi),
        )
        # Only a shell command runs programs (Profile.shell): execute rights.
        run = _landlock.FS_EXECUTE if profile.may_execute else 0
        grants = [(p, _landlock.READ_ONLY | run) for p in profile.read_only]
        grants += [(p, _landlock.DEVICE) for p in profile.devices]
        if spec.HasField("view"):
            grants += [(p, _landlock.READ_ONLY) for p, _ in view_files]
        if profile.scratch_dir is None:
            grants.append((profile.work_dir, _landlock.READ_WRITE | run))
        else:
            grants.append((profile.work_dir, _landlock.READ_ONLY | run))
            grants.append((profile.scratch_dir, _landlock.READ_WRITE))
        for path, access in grants:
            landlock.paths.append(sandbox_pb2.LandlockPath(path=path, access=access & handled_fs))
        if landlock.handled_net:
            landlock.bind_ports.extend(profile.bind_ports)
            landlock.connect_ports.extend(profile.connect_ports)
        spec.landlock.CopyFrom(landlock)
    return spec, tuple(degraded)
