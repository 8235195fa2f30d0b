"""The provider worker's manifest and config, written by the core.

The worker's egress is the provider's host and port, so its manifest is the
configuration's: the core writes it, with the serialized ProviderConfig
(0600) beside it, into a directory of its own per worker. A worker that is
replaced (``model.provider`` moved, or providers.json changed) may still be
draining calls, so the new one never writes over its files; the directory of
a stopped worker is removed (it holds an API key).
"""

from __future__ import annotations

import math
import os
import shutil
import urllib.parse

from naga.constants import PROVIDER_CONFIG_FILE as CONFIG_FILE
from naga.constants import PROVIDER_PLUGIN, PROVIDER_TOOL
from naga.plugin import Manifest
from naga.v1 import agent_pb2 as apb
from naga_core._providers import Provider
from naga_core.agent._config import AgentConfig
from naga_core.plugins import Installed

_PROVIDER_MANIFEST = """\
name = "{name}"
version = "1.0.0"
kind = "model_provider"
description = "Model calls to {provider} ({api}), written by naga-core from providers.json"
entry = "naga_plugins.providers:main"

[limits]
call_timeout_s = {call_timeout_s}
max_concurrent_calls = 8

[[egress]]
host = "{host}"
port = {port}

[[tools]]
name = "{tool}"
risk = "R0"
description = "One chat completion: a naga.v1.ChatRequest in the Invoke's payload"
"""


def host_port(base_url: str) -> tuple[str, int]:
    url = urllib.parse.urlsplit(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    return url.hostname or "", port


def configs_root(home_root: str) -> str:
    # Beside the work directory, not in it: the sandbox maps these read-only.
    return os.path.join(home_root, "work", "provider-config")


def clear_configs(home_root: str) -> None:
    """Remove what an earlier core left (its keys may since be revoked)."""
    shutil.rmtree(configs_root(home_root), ignore_errors=True)


def remove_config(home_root: str, installed: Installed) -> None:
    """Remove a stopped worker's manifest and config (only ever one of ours)."""
    if os.path.dirname(installed.directory) == configs_root(home_root):
        shutil.rmtree(installed.directory, ignore_errors=True)


def write_provider(
    home_root: str,
    provider: Provider,
    config: AgentConfig,
    generation: int,
    *,
    embedded: bool = False,
) -> tuple[Installed, apb.ProviderConfig]:
    """The manifest and config for worker number ``generation`` of ``provider``."""
    host, port = host_port(provider.base_url)
    # "@" and a leading "." cannot be in a providers.json name: no clash.
    name = ".embedded" if embedded else provider.name
    directory = os.path.join(configs_root(home_root), f"{name}@{generation}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, "plugin.toml")
    text = _PROVIDER_MANIFEST.format(
        name=PROVIDER_PLUGIN,
        provider=provider.name,
        api=provider.api,
        host=host,
        port=port,
        tool=PROVIDER_TOOL,
        # The longest a call may be given: a turn's. Not a hang limit (a
        # typed call hangs only by missed heartbeats).
        call_timeout_s=min(600, max(1, math.ceil(config.turn_timeout_s))),
    )
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    provider_config = apb.ProviderConfig(
        provider=provider.name,
        api=provider.api,
        base_url=provider.base_url,
        api_key=provider.api_key,
        model=provider.model,
        read_timeout_s=config.model_read_timeout_s,
        max_retries=config.model_max_retries,
    )
    fd = os.open(
        os.path.join(directory, CONFIG_FILE),
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
        0o600,
    )
    with os.fdopen(fd, "wb") as f:
        f.write(provider_config.SerializeToString())
    # Its egress is the owner's providers.json: a local model is on loopback.
    installed = Installed(Manifest.load(path, local_egress=True), directory, shipped=True)
    return installed, provider_config


__all__ = ["clear_configs", "host_port", "remove_config", "write_provider"]
