"""The Naga kernel (SPEC section 4, "L0 kernel and ledger"; docs/design/kernel.md).

Every state change is an effect journaled in the ledger: registrations with
derived inverses, performs with their author's inverse (or marked
irreversible), brackets released after a crash, and rollbacks that are
effects themselves. State families built on it: typed settings, the trust
table with its ratchet (INV-6), shadow branches. The lifecycle planner for
declarative components (INV-1) sits at the bottom, pure; the component
runtime executes its plans as effects.

Composition roots open the kernel with :func:`open_kernel`, which wires the
privilege ratchets; ``Kernel.open`` alone enforces none.
"""

from naga_core.kernel._branch import Branch, open_branch
from naga_core.kernel._component_types import ComponentError
from naga_core.kernel._components import ComponentSpec, LifecyclePlanner, one_shot
from naga_core.kernel._effect import (
    APPLIED_KIND,
    EFFECT_KIND,
    PINNED_FAMILIES,
    ActionFailed,
    Actions,
    Change,
    ImageRejected,
    Keep,
    OwnerRequired,
    PinnedFamily,
    Ratchet,
    RollbackPreview,
    action,
    replay,
)
from naga_core.kernel._kernel import Kernel
from naga_core.kernel._runtime import Component, ComponentRuntime
from naga_core.kernel._settings import (
    DEFAULT_SETTINGS,
    MAX_NAME_CHARS,
    InvalidSetting,
    SettingError,
    SettingInfo,
    Settings,
    SettingSpec,
    UnknownSetting,
)
from naga_core.kernel._state import KernelError, Scalar, State
from naga_core.kernel._trust import (
    MAX_PEER_CHARS,
    TRUST_FAMILY,
    InvalidPeer,
    TrustError,
    TrustLevel,
    TrustRaiseRefused,
    TrustTable,
    check_peer,
    trust_raises,
)
from naga_core.ledger import Ledger

RATCHETS = (trust_raises,)


def open_kernel(ledger: Ledger, actions: Actions) -> Kernel:
    """The kernel over ``ledger`` with every privilege ratchet in force."""
    return Kernel.open(ledger, actions, ratchets=RATCHETS)


__all__ = [
    "APPLIED_KIND",
    "DEFAULT_SETTINGS",
    "EFFECT_KIND",
    "MAX_NAME_CHARS",
    "MAX_PEER_CHARS",
    "PINNED_FAMILIES",
    "RATCHETS",
    "PinnedFamily",
    "Ratchet",
    "Keep",
    "TRUST_FAMILY",
    "ActionFailed",
    "Actions",
    "Branch",
    "Change",
    "Component",
    "ComponentError",
    "ComponentRuntime",
    "ComponentSpec",
    "ImageRejected",
    "Kernel",
    "InvalidPeer",
    "InvalidSetting",
    "KernelError",
    "LifecyclePlanner",
    "OwnerRequired",
    "RollbackPreview",
    "SettingError",
    "SettingInfo",
    "SettingSpec",
    "Settings",
    "Scalar",
    "State",
    "TrustError",
    "TrustLevel",
    "TrustRaiseRefused",
    "TrustTable",
    "UnknownSetting",
    "action",
    "one_shot",
    "open_branch",
    "open_kernel",
    "replay",
    "check_peer",
    "trust_raises",
]
