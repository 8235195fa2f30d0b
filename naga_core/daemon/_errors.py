"""Errors of the core daemon: its start-up, the calls it refuses."""

from __future__ import annotations

import grpc

from naga_core.errors import NagaError


class DaemonError(NagaError):
    """Root of the daemon's own errors."""


class CoreAlreadyRunning(DaemonError):
    """Another core holds this home's lock. ``pid`` names it when known."""

    def __init__(self, home: str, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"another naga-core ({who}) is already serving {home}; "
            "stop it first (naga daemon stop) or use another NAGA_HOME"
        )
        self.pid = pid


class RunDirError(DaemonError):
    """The run directory, its socket path or one of its files is unusable."""


class CredentialMissing(DaemonError):
    """A call came without a credential (UNAUTHENTICATED)."""


class CredentialRefused(DaemonError):
    """A call's credential is malformed or not accepted (PERMISSION_DENIED)."""


class RequestRefused(DaemonError):
    """A request breaks a field's rule; ``code`` is the status the caller gets.

    Build with the named constructors, which fix the code by what is wrong.
    """

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def invalid(cls, message: str) -> RequestRefused:
        return cls(grpc.StatusCode.INVALID_ARGUMENT, message)

    @classmethod
    def out_of_range(cls, message: str) -> RequestRefused:
        return cls(grpc.StatusCode.OUT_OF_RANGE, message)

    @classmethod
    def denied(cls, message: str) -> RequestRefused:
        return cls(grpc.StatusCode.PERMISSION_DENIED, message)

    @classmethod
    def exhausted(cls, message: str) -> RequestRefused:
        return cls(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


class ConsoleProofRequired(DaemonError):
    """An owner-only console change came from the gateway without the
    owner's console session (or with one that is not the owner's now)."""


class CoreStopping(DaemonError):
    """The core is shutting down; the caller may retry against the next one."""
