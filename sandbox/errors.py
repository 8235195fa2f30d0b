"""Every exception the sandbox package raises, under one root.

``sandbox`` must not import ``naga_core`` (the sandboxed side imports it too),
so its root :class:`SandboxError` mirrors ``naga_core.errors.NagaError``
instead of deriving from it; the core translates these once, where it calls
the launcher.
"""

from __future__ import annotations

from collections.abc import Sequence


class SandboxError(Exception):
    """Root of every error the sandbox package raises on purpose."""


class ProfileInvalid(SandboxError, ValueError):
    """A profile or launch argument is malformed (bad path, port, limit, name)."""


class LayerUnavailable(SandboxError):
    """This kernel cannot enforce what the profile requires, and the profile
    does not allow degraded mode. ``missing`` names each layer with why."""

    def __init__(self, profile: str, missing: Sequence[tuple[str, str]]) -> None:
        self.profile = profile
        self.missing = tuple(missing)
        lines = "; ".join(f"{layer}: {why}" for layer, why in self.missing)
        super().__init__(
            f"sandbox profile {profile!r} cannot be enforced on this kernel ({lines}); "
            "pass allow_degraded=True to the profile to run with less isolation"
        )


class LaunchFailed(SandboxError):
    """The sandboxed child did not become ready.

    ``layer`` is the setup step that failed (``"seccomp"``, ``"landlock_fs"``,
    ``"target"``, ...) or ``None`` when the child died or hung before saying;
    ``errno`` is the OS error number when one caused it (else 0); ``exit`` is
    the child's exit description when it is known.
    """

    def __init__(
        self,
        detail: str,
        *,
        layer: str | None = None,
        errno: int = 0,
        exit: str | None = None,
    ) -> None:
        where = f" at layer {layer}" if layer else ""
        tail = f" (child {exit})" if exit else ""
        super().__init__(f"sandboxed child failed to start{where}: {detail}{tail}")
        self.detail = detail
        self.layer = layer
        self.errno = errno
        self.exit = exit


class ProtocolError(SandboxError):
    """The launcher and its child disagreed on the handshake bytes."""


class ForkerUnavailable(SandboxError, RuntimeError):
    """A launch through a :class:`sandbox.Forker` that cannot fork: not
    started, closed, or inherited by a forked copy of its owner's process."""
