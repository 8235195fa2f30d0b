"""``naga.v1.PluginInstallService``: installing and removing plugins with
the owner's consent (naga_core.plugins._install; issue 11, item 6).

Both are the owner's (its CLI showed what the manifest asks and the owner
said yes); each is a kernel effect, so ``naga rollback`` undoes it. The
files of a removed plugin stay (never run) so that a rollback can install
them again.
"""

from __future__ import annotations

import functools
import os

import trio

from naga.v1 import plugin_install_pb2 as ipb
from naga_core.daemon import _checks
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import AsyncUnary, Method
from naga_core.daemon._core import Core
from naga_core.plugins import (
    INSTALL_FAMILY,
    SHIPPED_ROOT,
    Catalog,
    InstallRefused,
    PluginError,
    PluginHost,
    Root,
    place,
    registration,
    stage_data_install,
    stage_data_removal,
)

SERVICE = "naga.v1.PluginInstallService"


class InstallServicer:
    def __init__(self, core: Core, host: PluginHost) -> None:
        self._core = core
        self._host = host

    def methods(self) -> list[Method]:
        return [
            AsyncUnary("Install", ipb.InstallPluginRequest, self.install, check_install),
            AsyncUnary("Remove", ipb.RemovePluginRequest, self.remove, check_remove),
        ]

    def _installs(self) -> dict[str, object]:
        return dict(self._core.kernel.state.family(INSTALL_FAMILY))

    async def install(
        self, p: Principal, req: ipb.InstallPluginRequest
    ) -> ipb.InstallPluginResponse:
        root = os.path.join(self._core.home.root, "plugins")
        manifest, folder, digest = await trio.to_thread.run_sync(
            functools.partial(
                place,
                root,
                req.source,
                req.code_hash,
                frozenset(_shipped_names()),
                local_network=req.local_network,
            )
        )
        value = registration(digest, req.local_network)
        previous = sorted(
            {_version_of(f) for f in self._installs() if _name_of(f) == manifest.name} - {""}
        )
        said = (
            f"install plugin {manifest.name} {manifest.version} (sha256 {digest[:12]}) "
            f"by {p.name}"
            + (", with egress to the local network" if req.local_network else "")
            + (f", beside {', '.join(previous)}" if previous else "")
        )
        kernel = self._core.kernel
        installed_before = any(_name_of(f) == manifest.name for f in self._installs())

        def install() -> int:
            seq = kernel.register(INSTALL_FAMILY, folder, value, description=said)
            # Its data is its install's: a name taken again after a removal starts empty.
            stage_data_install(kernel, manifest.name, digest, installed_before=installed_before)
            return seq

        seq = self._core.write(install)
        self._host.rescan()
        try:
            self._host.known(manifest.name)
            restart = False
        except PluginError:
            restart = True
        return ipb.InstallPluginResponse(
            name=manifest.name,
            version=manifest.version,
            directory=os.path.join(root, folder),
            code_hash=digest,
            seq=seq,
            previous_versions=previous,
            restart_needed=restart,
        )

    async def remove(self, p: Principal, req: ipb.RemovePluginRequest) -> ipb.RemovePluginResponse:
        if req.name in _shipped_names():
            raise InstallRefused(
                f"{req.name} is shipped with Naga and cannot be removed; "
                f"`naga plugin disable {req.name}` stops it"
            )
        folders = sorted(f for f in self._installs() if _name_of(f) == req.name)
        if not folders:
            raise InstallRefused(f"no plugin named {req.name!r} is installed in the home")
        try:
            if self._host.disable(req.name):
                await self._host.wait_stopped(req.name)
        except PluginError:
            pass  # not loaded by this core (installed since it started): nothing runs

        def uninstall() -> int:
            seq = 0
            for folder in folders:
                seq = self._core.kernel.register(
                    INSTALL_FAMILY, folder, None, description=f"remove plugin {folder} by {p.name}"
                )
            stage_data_removal(self._core.kernel, req.name)
            return seq

        seq = self._core.write(uninstall)
        self._host.rescan()
        root = os.path.join(self._core.home.root, "plugins")
        return ipb.RemovePluginResponse(
            directories=[os.path.join(root, f) for f in folders], seq=seq
        )


def _shipped_names() -> set[str]:
    return set(Catalog.scan([Root(SHIPPED_ROOT, shipped=True)]).plugins)


def _name_of(folder: str) -> str:
    return folder.split("-", 1)[0]


def _version_of(folder: str) -> str:
    parts = folder.split("-")
    return parts[1] if len(parts) == 3 else ""


def check_install(req: ipb.InstallPluginRequest) -> None:
    _checks.text("source", req.source, max_chars=4096)
    _checks.text("code_hash", req.code_hash, max_chars=64)


def check_remove(req: ipb.RemovePluginRequest) -> None:
    _checks.text("name", req.name, max_chars=64)


__all__ = ["SERVICE", "InstallServicer"]
