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
from naga_core.plugins._session import OnProgress
from naga_core.plugins._tokens import PLUGIN_ROLE, PluginTokens
from naga_core.plugins._worker import Worker, WorkerState

__all__ = [
    "NET_FACT",
    "PLUGIN_ROLE",
    "SHIPPED_ROOT",
    "VERSION_FAMILY",
    "CallTimedOut",
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
    "Worker",
    "WorkerHung",
    "WorkerState",
    "WorkerUnavailable",
    "component",
    "journaled",
]
