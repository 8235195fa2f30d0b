"""The model-provider plugin: the one process with network egress, to the
one host of the provider the core configured it for (docs/design/executor.md).

The core writes this plugin's manifest itself (its egress is the provider's
host and port from ``providers.json``), hands the provider's settings in a file
beside it (``provider.pb``: a ``naga.v1.ProviderConfig``, 0600) and
calls its one tool, ``provider.complete``, with a ``ChatRequest`` in the
Invoke's payload; the answer is a ``ProviderReply`` (the response or the
ModelError) in the Result's payload.
"""

from naga_plugins.providers._provider import (
    CONFIG_FILE,
    PROVIDER_PLUGIN,
    PROVIDER_TOOL,
    ProviderLoop,
    build,
    main,
    read_config,
)

__all__ = [
    "CONFIG_FILE",
    "PROVIDER_PLUGIN",
    "PROVIDER_TOOL",
    "ProviderLoop",
    "build",
    "read_config",
    "main",
]
