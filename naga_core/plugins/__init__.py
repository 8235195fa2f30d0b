"""The plugin host: installed plugins as kernel components, one sandboxed
worker process each, supervised and rebuilt (docs/design/plugins.md).

:class:`PluginHost` discovers plugins (``naga_plugins/examples``,
``$NAGA_HOME/plugins``), drives them through the kernel's component runtime
(enable, disable and replace are effects a rollback undoes), supervises
their workers (crash, hang, leak, stop, bad frames: the call fails with a
clear error, the worker is rebuilt with backoff, a crash loop ends in
FAILED) and runs their tools for the PluginService.
"""

from naga_core.plugins._catalog import Catalog, Installed, Root
from naga_core.plugins._data import DATA_FAMILY
from naga_core.plugins._data import stage_install as stage_data_install
from naga_core.plugins._data import stage_removal as stage_data_removal
from naga_core.plugins._errors import (
    CallTimedOut,
    PluginError,
    PluginNotFound,
    PluginUnavailable,
    ToolArgumentsInvalid,
    ToolFailed,
    WorkerHung,
    WorkerUnavailable,
)
from naga_core.plugins._host import (
    NET_FACT,
    SHIPPED_ROOT,
    VERSION_FAMILY,
    PluginHost,
    PluginsConfig,
    PluginView,
    component,
    journaled,
)
from naga_core.plugins._host import Core as HostCore
from naga_core.plugins._install import (
    INSTALL_FAMILY,
    InstallRefused,
    code_hash,
    consent,
    place,
    read_manifest,
    registration,
    unpack,
)
from naga_core.plugins._session import OnProgress, TypedCall
from naga_core.plugins._tokens import PLUGIN_ROLE, PluginTokens
from naga_core.plugins._worker import Worker, WorkerState

__all__ = [
    "DATA_FAMILY",
    "INSTALL_FAMILY",
    "stage_data_install",
    "stage_data_removal",
    "InstallRefused",
    "code_hash",
    "consent",
    "place",
    "read_manifest",
    "registration",
    "unpack",
    "NET_FACT",
    "PLUGIN_ROLE",
    "SHIPPED_ROOT",
    "VERSION_FAMILY",
    "CallTimedOut",
    "HostCore",
    "Catalog",
    "Installed",
    "OnProgress",
    "PluginError",
    "PluginHost",
    "PluginNotFound",
    "PluginTokens",
    "PluginUnavailable",
    "PluginView",
    "PluginsConfig",
    "Root",
    "ToolArgumentsInvalid",
    "ToolFailed",
    "TypedCall",
    "Worker",
    "WorkerHung",
    "WorkerState",
    "WorkerUnavailable",
    "component",
    "journaled",
]
