"""A home plugin's data belongs to its install, not to its name (issue 11).

Before, every plugin's work directory was ``work/plugins/<name>``: a plugin
installed under the name of a removed one was handed the removed one's
data (a notes plugin's notes, a channel's login state). Now a home plugin's
data directory is named by a ``plugin.data/<name>`` registration in the
kernel, made by the install that finds no version of that name installed
(``<name>@<code hash 12>-<random 8 hex>``, under ``work/plugins``) and
cleared by the removal of its last version. Upgrades and versions
installed side by side share it (the owner installed them under that
name while it was installed); a removal ends it; a rollback of the
removal brings the same registration, and so the same data, back. The
files of a removed plugin's data stay on disk (a rollback may want them),
reached by no later install.

Shipped plugins (reserved names) and plugins of roots the owner's
configuration names (no install step) keep ``work/plugins/<name>``: no
other plugin may take those names, or the owner chose the folder.

Homes from before: at the plugin host's start, an installed name with no
registration is given ``<name>@legacy`` and its old ``work/plugins/<name>``
directory is renamed to it (once, idempotent across a crash between the
two steps: the rename goes first and is skipped when done).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable

from naga_core.kernel import Kernel
from naga_core.plugins._catalog import Installed

#: The kernel family: plugin name -> its data directory's name under ``work/plugins``.
DATA_FAMILY = "plugin.data"
LEGACY_SUFFIX = "@legacy"


def work_root(home_root: str) -> str:
    return os.path.join(home_root, "work", "plugins")


def data_dir_name(kernel: Kernel, plugin: Installed) -> str:
    """The name of ``plugin``'s data directory under :func:`work_root`."""
    name = plugin.manifest.name
    if not plugin.by_install:
        return name
    found = kernel.state.get((DATA_FAMILY, name))
    if isinstance(found, str) and found:
        return found
    # Not registered (installed before this core started and not migrated,
    # which serve() does first): never fall back to the shared name.
    return f"{name}{LEGACY_SUFFIX}"


def stage_install(kernel: Kernel, name: str, digest: str, *, installed_before: bool) -> None:
    """In the install's write: a fresh data directory unless a version of
    ``name`` is installed already (an upgrade keeps its data)."""
    if installed_before and isinstance(kernel.state.get((DATA_FAMILY, name)), str):
        return
    fresh = f"{name}@{digest[:12]}-{secrets.token_hex(4)}"
    kernel.register(
        DATA_FAMILY,
        name,
        fresh,
        description=f"plugin {name} keeps its data in work/plugins/{fresh}",
    )


def stage_removal(kernel: Kernel, name: str) -> None:
    """In the removal's write: the name's data ends with its last version."""
    if kernel.state.get((DATA_FAMILY, name)) is not None:
        kernel.register(
            DATA_FAMILY, name, None, description=f"plugin {name} removed: its data is no one's"
        )


def migrate(kernel: Kernel, home_root: str, names: Iterable[str]) -> list[str]:
    """Give each installed ``names`` without a data registration its old
    ``work/plugins/<name>`` as ``<name>@legacy``; the names migrated."""
    root = work_root(home_root)
    done: list[str] = []
    for name in sorted(set(names)):
        if kernel.state.get((DATA_FAMILY, name)) is not None:
            continue
        legacy, target = os.path.join(root, name), os.path.join(root, f"{name}{LEGACY_SUFFIX}")
        if os.path.isdir(legacy) and not os.path.lexists(target):
            os.rename(legacy, target)
        kernel.register(
            DATA_FAMILY,
            name,
            f"{name}{LEGACY_SUFFIX}",
            description=f"plugin {name}: its data (from before installs had their own) moved "
            f"to work/plugins/{name}{LEGACY_SUFFIX}",
        )
        done.append(name)
    return done


__all__ = [
    "DATA_FAMILY",
    "LEGACY_SUFFIX",
    "data_dir_name",
    "migrate",
    "stage_install",
    "stage_removal",
    "work_root",
]
