"""The plugins installed: every ``<root>/<dir>/plugin.toml`` that validates.

Roots are scanned in order: the shipped plugins (``naga_plugins/examples``),
then ``$NAGA_HOME/plugins``, then any the configuration adds. Several
versions of one plugin may be installed side by side (in different
directories); the first directory to provide a (name, version) wins and a
later one is reported as a problem. A manifest that does not validate is
never run; it is reported under its directory's name, with every reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from naga.constants import PLUGIN_MANIFEST_NAME
from naga.plugin import Manifest
from naga.plugin.errors import ManifestInvalid


@dataclass(frozen=True, slots=True)
class Root:
    """A directory whose subdirectories are plugins."""

    path: str
    shipped: bool


@dataclass(frozen=True, slots=True)
class Installed:
    """One installed version of a plugin."""

    manifest: Manifest
    directory: str
    shipped: bool

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
    def scan(cls, roots: Sequence[Root]) -> Catalog:
        found: dict[str, dict[tuple[int, int, int], Installed]] = {}
        problems: dict[str, list[str]] = {}
        for root in roots:
            for directory in _plugin_dirs(root.path):
                path = os.path.join(directory, PLUGIN_MANIFEST_NAME)
                try:
                    manifest = Manifest.load(path)
                except ManifestInvalid as exc:
                    problems.setdefault(os.path.basename(directory), []).append(str(exc))
                    continue
                versions = found.setdefault(manifest.name, {})
                other = versions.get(manifest.version_key)
                if other is not None:
                    problems.setdefault(manifest.name, []).append(
                        f"{path}: {manifest.name} {manifest.version} is already installed "
                        f"from {other.directory}; this copy is ignored"
                    )
                    continue
                versions[manifest.version_key] = Installed(manifest, directory, root.shipped)
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
