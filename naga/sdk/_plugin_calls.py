"""The client's calls of the PluginService: listing, lifecycle, invoking."""

from __future__ import annotations

import json

from naga.sdk import errors
from naga.sdk._rpc import Rpc
from naga.v1 import plugin_service_pb2 as spb

_PLUGIN = "/naga.v1.PluginService/"
# What a plugin call's gRPC deadline adds to the call's own timeout, so the
# core's clear answer (hung, timed out) arrives before grpcio's bare one.
_INVOKE_SLACK_S = 2.0


class PluginCalls(Rpc):
    def plugins(self, *, timeout: float | None = None) -> list[spb.PluginInfo]:
        """Every installed plugin, enabled or not, by name."""
        req = spb.ListPluginsRequest()
        answer = self._read(_PLUGIN + "List", req, spb.ListPluginsResponse, timeout)
        return list(answer.plugins)

    def enable_plugin(
        self, name: str, *, wait: float = 10.0, timeout: float | None = None
    ) -> spb.EnablePluginResponse:
        """Enable ``name`` (retry it, if it failed); wait up to ``wait``
        seconds for its worker to run. The answer's state says how far it got."""
        req = spb.EnablePluginRequest(name=name, wait_ms=round(wait * 1000))
        deadline = timeout or wait + self._timeout
        return self._write(_PLUGIN + "Enable", req, spb.EnablePluginResponse, deadline)

    def disable_plugin(
        self, name: str, *, timeout: float | None = None
    ) -> spb.DisablePluginResponse:
        """Disable ``name``: its worker stops; nothing else restarts."""
        req = spb.DisablePluginRequest(name=name)
        return self._write(_PLUGIN + "Disable", req, spb.DisablePluginResponse, timeout)

    def replace_plugin(
        self, name: str, version: str, *, wait: float = 10.0, timeout: float | None = None
    ) -> spb.ReplacePluginResponse:
        """Run installed ``version`` of ``name`` from now on."""
        req = spb.ReplacePluginRequest(name=name, version=version, wait_ms=round(wait * 1000))
        deadline = timeout or wait + self._timeout
        return self._write(_PLUGIN + "Replace", req, spb.ReplacePluginResponse, deadline)

    def invoke(
        self,
        plugin: str,
        tool: str,
        arguments: object = None,
        *,
        timeout: float | None = None,
    ) -> object:
        """Call ``tool`` of ``plugin`` with ``arguments`` (a JSON-able
        mapping, or JSON text); the tool's result, decoded. ``timeout`` (the
        client's default if None) bounds this call; the plugin's own call
        timeout bounds how long its worker may take before it counts as hung."""
        return json.loads(self.invoke_raw(plugin, tool, arguments, timeout=timeout).result_json)

    def invoke_raw(
        self,
        plugin: str,
        tool: str,
        arguments: object = None,
        *,
        timeout: float | None = None,
    ) -> spb.InvokeToolResponse:
        """As :meth:`invoke`, returning the response (result JSON text, pid)."""
        if arguments is None:
            text = ""
        elif isinstance(arguments, str):
            text = arguments
        else:
            try:
                text = json.dumps(arguments, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise errors.InvalidArgument(f"arguments are not JSON-able: {exc}") from None
        wait = self._timeout if timeout is None else timeout
        req = spb.InvokeToolRequest(
            plugin=plugin, tool=tool, arguments_json=text, timeout_ms=max(1, round(wait * 1000))
        )
        return self._write(_PLUGIN + "Invoke", req, spb.InvokeToolResponse, wait + _INVOKE_SLACK_S)


__all__ = ["PluginCalls"]
