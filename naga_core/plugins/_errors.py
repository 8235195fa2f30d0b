"""What a caller of a plugin can be told, one class per cause.

Each maps to one gRPC status in ``naga_core.daemon._status``; the message
names the plugin, the tool and what happened ("plugin clock: the worker
(pid 4242) ended during clock.now: crashed (SIGSEGV); it is being rebuilt").
"""

from __future__ import annotations

from naga_core.errors import NagaError


class PluginError(NagaError):
    """Root of the plugin host's errors."""


class PluginNotFound(PluginError):
    """No installed plugin (or version, or tool) by that name (NOT_FOUND)."""


class PluginUnavailable(PluginError):
    """The plugin cannot take calls in its present state: disabled, failed
    after a crash loop, or without a valid manifest (FAILED_PRECONDITION).
    The owner's action changes that, not a retry."""


class WorkerUnavailable(PluginError):
    """The worker died during the call, or is being rebuilt and was not
    ready in time (UNAVAILABLE). A retry goes to the rebuilt worker."""


class WorkerHung(PluginError):
    """The call outlived the plugin's call timeout: the worker was deemed
    hung, killed and is being rebuilt (DEADLINE_EXCEEDED)."""


class CallTimedOut(PluginError):
    """The caller's own timeout passed first; the worker was left running
    (DEADLINE_EXCEEDED)."""


class ToolArgumentsInvalid(PluginError):
    """The arguments do not match the tool's params (INVALID_ARGUMENT)."""


class ToolFailed(PluginError):
    """The tool ran and failed or refused; the message is the tool's
    (FAILED_PRECONDITION)."""


__all__ = [
    "CallTimedOut",
    "PluginError",
    "PluginNotFound",
    "PluginUnavailable",
    "ToolArgumentsInvalid",
    "ToolFailed",
    "WorkerHung",
    "WorkerUnavailable",
]
