"""The plugins installed: every ``<root>/<dir>/plugin.toml`` that validates.

Roots are scanned in order: the shipped plugins (``naga_plugins/examples``),
then ``$NAGA_HOME/plugins``, then any the configuration adds. Several
versions of one plugin may be installed side by side (in different
directories); the first directory to provide a (name, version) wins and a
later one is reported as a problem. A manifest that does not validate is
never run; it is reported under its directory's name, with every reason.

A shipped plugin's name is reserved: a plugin of another root that claims
it (a folder in ``$NAGA_HOME/plugins`` named ``notes`` with a higher
version) is never run, and is reported, so that it can take neither the
shipped plugin's tools nor its work directory (the owner's notes). Egress
to this machine or a private network is refused in every manifest of a root
that is not the owner's configuration (``Root.local_egress``).

In a root that needs installs (``$NAGA_HOME/plugins``), a folder runs only
if the owner installed its code as it is now (``naga plugin install``; the
``plugin.install`` registrations, naga_core.plugins._install): a folder
copied in by hand, or changed since, is listed as not installed, with how
to install it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from naga.constants import PLUGIN_MANIFEST_NAME
from naga.plugin import Manifest
from naga.plugin.errors import ManifestInvalid
from naga_core.plugins._install import LOCAL_NETWORK, approved_in


@dataclass(frozen=True, slots=True)
class Root:
    """A directory whose subdirectories are plugins."""

    path: str
    shipped: bool
    #: Manifests here may declare egress to loopback or private addresses
    #: (roots the owner's configuration names, never ``$NAGA_HOME/plugins``).
    local_egress: bool = False
    #: A folder here runs only once installed (its code hash registered).
    installs: bool = False


@dataclass(frozen=True, slots=True)
class Installed:
    """One installed version of a plugin."""

    manifest: Manifest
    directory: str
    shipped: bool
    #: Installed by the owner (``naga plugin install``): its data belongs
    #: to its install (naga_core.plugins._data), not to its name.
    by_install: bool = False

    @property
    def manifest_path(self) -> str:
        return os.path.join(self.directory, PLUGIN_MANIFEST_NAME)


def _empty_plugins() -> Mapping[str, tuple[Installed, ...]]:
    return MappingProxyType({})


def _empty_problems() -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Catalog:
    """Installed plugins by name (versions ascending), and the problems found."""

    plugins: Mapping[str, tuple[Installed, ...]] = field(default_factory=_empty_plugins)
    problems: Mapping[str, tuple[str, ...]] = field(default_factory=_empty_problems)

    @classmethod
    def scan(cls, roots: Sequence[Root], installs: Mapping[str, object] | None = None) -> Catalog:
        """``installs``: the install registrations (folder -> code hash);
        None before the kernel is open, when every valid folder is listed
        (the components are fixed then) but none of an ``installs`` root
        can run yet."""
        found: dict[str, dict[tuple[int, int, int], Installed]] = {}
        problems: dict[str, list[str]] = {}
        reserved: set[str] = set()
        for root in roots:
            for directory in _plugin_dirs(root.path):
                path = os.path.join(directory, PLUGIN_MANIFEST_NAME)
                gated = root.installs and installs is not None
                approval = approved_in(directory, installs) if gated and installs else None
                # Local egress: the owner's configured roots, an install the
                # owner approved with it, or a folder read only to be listed
                # (not installed: it never runs).
                local = (
                    root.local_egress
                    or approval == LOCAL_NETWORK
                    or (root.installs and approval is None)
                )
                try:
                    manifest = Manifest.load(path, local_egress=local)
                except ManifestInvalid as exc:
                    problems.setdefault(os.path.basename(directory), []).append(str(exc))
                    continue
                if root.shipped:
                    reserved.add(manifest.name)
                elif manifest.name in reserved:
                    problems.setdefault(manifest.name, []).append(
                        f"{path}: {manifest.name!r} is the name of a plugin shipped with Naga; "
                        "another plugin may not take it (nor its tools or its data): this "
                        "copy is never run; rename it to install it"
                    )
                    continue
                if gated and approval is None:
                    problems.setdefault(manifest.name, []).append(
                        f"{directory}: not installed (copied in, or changed since it was "
                        f"installed), so never run: `naga plugin install {directory}` shows "
                        "what it asks for and installs it"
                    )
                    continue
                versions = found.setdefault(manifest.name, {})
                other = versions.get(manifest.version_key)
                if other is not None:
                    problems.setdefault(manifest.name, []).append(
                        f"{path}: {manifest.name} {manifest.version} is already installed "
                        f"from {other.directory}; this copy is ignored"
                    )
                    continue
                versions[manifest.version_key] = Installed(
                    manifest, directory, root.shipped, by_install=gated
                )
        return cls(
            MappingProxyType(
                {
                    name: tuple(v for _, v in sorted(versions.items()))
                    for name, versions in sorted(found.items())
                }
            ),
            MappingProxyType({k: tuple(v) for k, v in sorted(problems.items())}),
        )

    def names(self) -> list[str]:
        """Every plugin name with a valid version or a problem."""
        return sorted(set(self.plugins) | set(self.problems))

    def versions(self, name: str) -> tuple[Installed, ...]:
        return self.plugins.get(name, ())

    def get(self, name: str, version: str | None = None) -> Installed | None:
        """That version, or (``version`` None) the newest."""
        versions = self.versions(name)
        if version is None:
            return versions[-1] if versions else None
        return next((v for v in versions if v.manifest.version == version), None)


def _plugin_dirs(root: str) -> list[str]:
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [
        e.path
        for e in entries
        if not e.name.startswith((".", "_"))
        and e.is_dir(follow_symlinks=False)
        and os.path.isfile(os.path.join(e.path, PLUGIN_MANIFEST_NAME))
    ]


__all__ = ["Catalog", "Installed", "Root"]
