"""``provider.complete``: one chat call through :class:`ModelAdapter`.

The plugin SDK runs each call on a thread; the adapter is a trio object
that keeps its connections between calls, so it lives on one trio loop in
a thread of its own (:class:`ProviderLoop`), and each call crosses to it
with ``trio.from_thread.run``. The call is streamed from the provider (so a
stall is seen by the read timeout between chunks, and the first byte is
timed) and answered whole.
"""

from __future__ import annotations

import base64
import binascii
import os
import threading
from collections.abc import Sequence

import trio
from google.protobuf.message import DecodeError

from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2
from naga_plugins._plugin import Plugin
from naga_plugins.errors import PluginSetupError, ToolFailed
from naga_plugins.models import Endpoint, ModelAdapter, RetryPolicy, Timeouts
from naga_plugins.models.errors import ModelCallFailed, ProviderError

#: The plugin's name and its tool (the manifest the core writes names them).
PROVIDER_PLUGIN = "provider"
PROVIDER_TOOL = "provider.complete"
#: The file beside the manifest holding the serialized ProviderConfig (0600;
#: the sandbox maps that directory read-only, and only for this worker).
CONFIG_FILE = "provider.pb"


def read_config(manifest_path: str) -> apb.ProviderConfig:
    """The ProviderConfig the core wrote beside the manifest."""
    path = os.path.join(os.path.dirname(manifest_path), CONFIG_FILE)
    try:
        with open(path, "rb") as f:
            return apb.ProviderConfig.FromString(f.read())
    except OSError as exc:
        raise PluginSetupError(f"cannot read {path}: {exc.strerror}") from None
    except DecodeError as exc:
        raise PluginSetupError(f"{path} is not a ProviderConfig: {exc}") from None


def _adapter(config: apb.ProviderConfig) -> ModelAdapter:
    endpoint = Endpoint.of(
        provider=config.provider,
        base_url=config.base_url,
        api_key=config.api_key,
        model=config.model,
    )
    timeouts = Timeouts(read_s=config.read_timeout_s) if config.read_timeout_s > 0 else Timeouts()
    retry = RetryPolicy()
    if config.max_retries >= 0:
        retry = RetryPolicy(max_attempts=config.max_retries + 1, base_delay_s=0.05, max_delay_s=0.5)
    return ModelAdapter.for_api(config.api, endpoint, timeouts=timeouts, retry=retry)


class ProviderLoop:
    """One trio loop on its own thread, holding the adapter; calls cross to it."""

    def __init__(self, config: apb.ProviderConfig) -> None:
        self._config = config
        self._token: trio.lowlevel.TrioToken | None = None
        self._adapter: ModelAdapter | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="naga-provider", daemon=True)
        self._failure: BaseException | None = None

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise PluginSetupError(f"the provider cannot start: {self._failure}")

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except ProviderError as exc:
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with _adapter(self._config) as adapter:
            self._adapter = adapter
            self._ready.set()
            await self._stop.wait()

    def close(self) -> None:
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()

    def complete(self, request: model_pb2.ChatRequest) -> apb.ProviderReply:
        assert self._token is not None
        return trio.from_thread.run(self._complete, request, trio_token=self._token)

    async def _complete(self, request: model_pb2.ChatRequest) -> apb.ProviderReply:
        assert self._adapter is not None

        async def ignore(_chunk: model_pb2.ChatChunk) -> None:
            return None

        try:
            response = await self._adapter.stream(request, ignore)
        except ModelCallFailed as exc:
            return apb.ProviderReply(error=exc.to_proto())
        return apb.ProviderReply(response=response)


def build(loop: ProviderLoop) -> Plugin:
    """The plugin, its tool answering through ``loop``."""
    built = Plugin(PROVIDER_PLUGIN)

    @built.tool(PROVIDER_TOOL)
    def complete(request: str) -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
        try:
            chat = model_pb2.ChatRequest.FromString(base64.b64decode(request, validate=True))
        except (binascii.Error, ValueError, DecodeError) as exc:
            raise ToolFailed(f"request is not a base64 ChatRequest: {exc}") from None
        reply = loop.complete(chat)
        return {"reply": base64.b64encode(reply.SerializeToString()).decode("ascii")}

    return built


def main(args: Sequence[str]) -> int:
    if len(args) != 2:
        os.write(
            2, f"plugin provider: expected SOCKET_FD MANIFEST_PATH, got {list(args)!r}\n".encode()
        )
        return 78
    try:
        loop = ProviderLoop(read_config(args[1]))
        loop.start()
    except PluginSetupError as exc:
        os.write(2, f"plugin provider: cannot serve: {exc}\n".encode())
        return 78
    try:
        return build(loop).main(args)
    finally:
        loop.close()
