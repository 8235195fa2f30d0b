"""Process isolation for Naga's sandboxed processes (SPEC section 1).

The gateway, every agent executor, every plugin and the embedded model
server run as separate processes under rlimits, no_new_privs, namespaces,
Landlock and a default-deny seccomp filter. :class:`Profile` says what one kind of process may do;
:func:`launch` starts a target under it, forked by the caller's
:class:`Forker`; :func:`detect` reports what this kernel offers. Design
and threat model: docs/design/sandbox.md.

This package never imports ``naga_core``: the sandboxed side imports it too.
"""

from sandbox._cgroup import (
    Cgroup,
    CgroupHost,
    CgroupLimits,
    CgroupSupport,
    CgroupVersion,
    detect_cgroups,
    sweep_stale_cgroups,
)
from sandbox._detect import KernelReport, detect
from sandbox._exit import Exit, ExitKind
from sandbox._fork import Forker
from sandbox._launcher import Sandboxed, launch
from sandbox._overlay import OPAQUE_XATTR, Overlay
from sandbox._overlay import probe as probe_overlay
from sandbox._plan import Degradation
from sandbox._policy import Action, ArgCheck, Compare, Rule, SeccompPolicy
from sandbox._profile import (
    CORE_SOCKET_ENV,
    EGRESS_SOCKET_ENV,
    MODEL_SERVER_ADDRESS_SPACE,
    MODEL_SERVER_LOG_LIMIT,
    PLUGIN_NICE,
    TOKEN_ENV,
    Egress,
    Kind,
    NetworkPolicy,
    Profile,
    Rlimits,
)
from sandbox._wire import Layer
from sandbox.errors import (
    ForkerUnavailable,
    LaunchFailed,
    LayerUnavailable,
    ProfileInvalid,
    ProtocolError,
    SandboxError,
)

__all__ = [
    "Action",
    "ArgCheck",
    "CORE_SOCKET_ENV",
    "Cgroup",
    "CgroupHost",
    "CgroupLimits",
    "CgroupSupport",
    "CgroupVersion",
    "Compare",
    "Degradation",
    "EGRESS_SOCKET_ENV",
    "Egress",
    "Exit",
    "ExitKind",
    "Forker",
    "ForkerUnavailable",
    "KernelReport",
    "Kind",
    "LaunchFailed",
    "Layer",
    "LayerUnavailable",
    "MODEL_SERVER_ADDRESS_SPACE",
    "MODEL_SERVER_LOG_LIMIT",
    "NetworkPolicy",
    "OPAQUE_XATTR",
    "Overlay",
    "PLUGIN_NICE",
    "Profile",
    "ProfileInvalid",
    "ProtocolError",
    "Rlimits",
    "Rule",
    "SandboxError",
    "Sandboxed",
    "SeccompPolicy",
    "TOKEN_ENV",
    "detect",
    "detect_cgroups",
    "sweep_stale_cgroups",
    "launch",
    "probe_overlay",
]
