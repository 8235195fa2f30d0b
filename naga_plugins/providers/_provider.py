"""``provider.complete``: one chat call through :class:`ModelAdapter`.

The plugin SDK runs each call on a thread; the adapter is a trio object
that keeps its connections between calls, so it lives on one trio loop in
a thread of its own (:class:`ProviderLoop`), and each call crosses to it
with ``trio.from_thread.run``. The call is streamed from the provider (so a
stall is seen by the read timeout between chunks, and the first byte is
timed); the reply's text goes to the core as Progress frames as it arrives
(held back where it may be a tool call written as text:
:class:`~naga_plugins.models.VisibleText`), and the whole answer is the
call's Result.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

import trio
from google.protobuf.message import DecodeError

from naga.constants import EGRESS_SOCKET_ENV, PROVIDER_CONFIG_FILE, PROVIDER_PLUGIN, PROVIDER_TOOL
from naga.plugin.errors import FrameError
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2
from naga.v1 import plugin_pb2 as ppb
from naga_plugins._egress import async_egress_transport
from naga_plugins._plugin import Plugin
from naga_plugins.errors import CallAnswered, PluginSetupError
from naga_plugins.models import Endpoint, ModelAdapter, RetryPolicy, Timeouts, VisibleText
from naga_plugins.models.errors import ModelCallFailed, ProviderError

#: The file beside the manifest holding the serialized ProviderConfig (0600;
#: the sandbox maps that directory read-only, and only for this worker).
CONFIG_FILE = PROVIDER_CONFIG_FILE
#: Kept from the core's deadline for the answer's way back.
_ANSWER_MARGIN_S = 0.5


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
    # With the core's egress proxy (no network of our own), every
    # connection goes through it; else (an older core) straight out.
    transport = async_egress_transport() if os.environ.get(EGRESS_SOCKET_ENV) else None
    return ModelAdapter.for_api(
        config.api, endpoint, timeouts=timeouts, retry=retry, transport=transport
    )


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

    def complete(
        self,
        request: model_pb2.ChatRequest,
        show: Callable[[str], None] | None = None,
        deadline_s: float | None = None,
    ) -> apb.ProviderReply:
        """One call within ``deadline_s`` (None: the adapter's own);
        ``show`` gets the reply's visible text as it streams."""
        assert self._token is not None
        return trio.from_thread.run(
            self._complete, request, show, deadline_s, trio_token=self._token
        )

    async def _complete(
        self,
        request: model_pb2.ChatRequest,
        show: Callable[[str], None] | None,
        deadline_s: float | None,
    ) -> apb.ProviderReply:
        adapter = self._adapter
        assert adapter is not None
        visible = VisibleText.for_request(request, text_calls=adapter.text_tool_calls)
        shown = _Shown(show)

        async def on_chunk(chunk: model_pb2.ChatChunk) -> None:
            if chunk.text_delta:
                shown(visible.feed(chunk.text_delta))

        try:
            response = await adapter.stream(request, on_chunk, deadline_s=deadline_s)
        except ModelCallFailed as exc:
            return apb.ProviderReply(error=exc.to_proto())
        shown(visible.finish(response.message.content))
        return apb.ProviderReply(response=response)


class _Shown:
    """Sends visible text on; stops at the first failure to send (the core is
    gone, and the answer will not reach it either)."""

    def __init__(self, show: Callable[[str], None] | None) -> None:
        self._show = show

    def __call__(self, text: str) -> None:
        if not text or self._show is None:
            return
        try:
            # A blocking send from the loop's thread: the socket pair is
            # local and the core's reader drains it continuously, so this
            # costs microseconds, less than a hop to another thread.
            self._show(text)
        except (OSError, FrameError, CallAnswered):
            self._show = None


def build(loop: ProviderLoop) -> Plugin:
    """The plugin, its tool answering through ``loop``."""
    built = Plugin(PROVIDER_PLUGIN)

    @built.typed_tool(PROVIDER_TOOL)
    def complete(invoke: ppb.Invoke) -> ppb.Result:  # pyright: ignore[reportUnusedFunction]
        # The adapter's deadline is the core's share for this call, less a
        # margin so that the answer (a TIMEOUT error at worst) arrives before
        # the core stops waiting for it.
        deadline_s = max(0.001, invoke.deadline_ms / 1000 - _ANSWER_MARGIN_S)
        reply = loop.complete(invoke.chat_request, built.current_call().progress, deadline_s)
        return ppb.Result(provider_reply=reply)

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
