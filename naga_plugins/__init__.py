"""Plugins: the worker-side SDK and the plugins shipped with Naga.

A plugin is a directory with a ``plugin.toml`` manifest (see
``naga.plugin.Manifest``) and a module whose entry function the core
launches in a sandbox, one process per plugin (docs/design/plugins.md)::

    from naga_plugins import Plugin, ToolFailed

    plugin = Plugin("clock")

    @plugin.tool("clock.now")
    def now(timezone: str = "UTC") -> dict[str, str]: ...

    main = plugin.main

A tool may send progress before it returns (``Plugin.current_call().progress(text)``;
the core appends it, e.g. a model's reply text as it streams).

The SDK speaks the wire (``naga.v1.plugin_pb2`` frames on an inherited
socket), answers heartbeats, checks each call's arguments against the
manifest and reports failures; a tool is an ordinary function. Shipped
plugins live in ``naga_plugins/examples``. This package never imports
``naga_core``.
"""

from naga_plugins._call import Call
from naga_plugins._egress import (
    AsyncProxiedTransport,
    ProxiedTransport,
    async_egress_transport,
    egress_socket,
    egress_transport,
)
from naga_plugins._plugin import SDK_VERSION, SETUP_EXIT_CODE, Plugin
from naga_plugins.errors import CallAnswered, PluginSdkError, PluginSetupError, ToolFailed

__all__ = [
    "SDK_VERSION",
    "SETUP_EXIT_CODE",
    "AsyncProxiedTransport",
    "Call",
    "CallAnswered",
    "Plugin",
    "PluginSdkError",
    "PluginSetupError",
    "ProxiedTransport",
    "ToolFailed",
    "async_egress_transport",
    "egress_socket",
    "egress_transport",
]
