"""Errors of the plugin SDK.

``naga_plugins`` never imports ``naga_core`` (it runs sandboxed), so its root
:class:`PluginSdkError` mirrors ``naga_core.errors.NagaError``.
"""

from __future__ import annotations


class PluginSdkError(Exception):
    """Root of every error the plugin SDK raises on purpose."""


class PluginSetupError(PluginSdkError):
    """The plugin's code does not match its manifest (a tool missing on one
    side, parameters that differ), or it was launched wrongly. The worker
    exits with :data:`naga_plugins.SETUP_EXIT_CODE` before its Hello."""


class ToolFailed(PluginSdkError):
    """Raise from a tool to fail the call with this message (one line, for
    the caller): "no note titled 'x'". Any other exception fails the call
    too, reported as its type and message."""


class CallAnswered(PluginSdkError):
    """Progress for a call whose answer was already sent: the wire allows
    none after the Result (docs/design/plugins.md)."""


__all__ = ["CallAnswered", "PluginSdkError", "PluginSetupError", "ToolFailed"]
