"""The client's calls of the PluginInstallService: installing and removing
plugins with the owner's consent (``naga plugin install``, ``remove``)."""

from __future__ import annotations

from naga.sdk._rpc import Rpc
from naga.v1 import plugin_install_pb2 as ipb

_INSTALL = "/naga.v1.PluginInstallService/"


class InstallCalls(Rpc):
    def install_plugin(
        self,
        source: str,
        code_hash: str,
        *,
        local_network: bool = False,
        timeout: float | None = None,
    ) -> ipb.InstallPluginResponse:
        """Install the plugin folder or archive at ``source`` (an absolute
        path the core reads), if its code's sha256 is ``code_hash`` (what
        the owner approved); owner only; an effect. ``local_network``: the
        owner also approves egress to this machine or its network."""
        req = ipb.InstallPluginRequest(
            source=source, code_hash=code_hash, local_network=local_network
        )
        return self._write(_INSTALL + "Install", req, ipb.InstallPluginResponse, timeout)

    def remove_plugin(self, name: str, *, timeout: float | None = None) -> ipb.RemovePluginResponse:
        """Uninstall every installed version of home plugin ``name``."""
        req = ipb.RemovePluginRequest(name=name)
        return self._write(_INSTALL + "Remove", req, ipb.RemovePluginResponse, timeout)


__all__ = ["InstallCalls"]
