"""The WeChat plugin's worker, as the core writes and runs it.

Its manifest is the core's (like the model provider's): written into
``$NAGA_HOME/work/wechat-config``, with ``egress_proxy``, so the worker has
no network and every connection goes through its egress proxy, whose
destinations are the hosts of ``wechat.api_base``, ``wechat.cdn_base`` and
every binding's base URL, asked per connection. :class:`WechatPlugin` is
the typed face of its tools (a proto in, a proto out).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

import sandbox
from naga.plugin import Manifest
from naga.v1 import wechat_media_pb2 as wmpb
from naga.v1 import wechat_pb2 as wpb
from naga_core.plugins import Installed, PluginError, Worker
from naga_core.supervisor import WorkerTuning
from naga_core.wechat._store import WechatError

M = TypeVar("M", bound=Message)

_MANIFEST = """\
name = "wechat"
version = "1.0.0"
kind = "channel"
description = "WeChat over the iLink bot protocol, written by naga-core"
entry = "naga_plugins.wechat:main"
capabilities = ["egress_proxy"]

[limits]
call_timeout_s = 30
max_concurrent_calls = 32

{egress}
[[tools]]
name = "wechat.poll"
risk = "R0"
description = "One getupdates long poll; a base64 naga.v1.WechatPollRequest"
[tools.params.request]
type = "string"
max_length = 60000

[[tools]]
name = "wechat.send"
risk = "R2"
description = "Send one text message; a base64 naga.v1.WechatSendRequest"
[tools.params.request]
type = "string"
max_length = 60000

[[tools]]
name = "wechat.typing"
risk = "R0"
description = "The typing indicator; a base64 naga.v1.WechatTypingRequest"
[tools.params.request]
type = "string"
max_length = 20000

[[tools]]
name = "wechat.notify"
risk = "R0"
description = "notifystart / notifystop; a base64 naga.v1.WechatAccount"
[tools.params.request]
type = "string"
max_length = 20000
[tools.params.which]
type = "string"
max_length = 8

[[tools]]
name = "wechat.media"
risk = "R0"
description = "Download, decrypt and check one media blob; a base64 naga.v1.WechatMediaRequest"
[tools.params.request]
type = "string"
max_length = 20000

[[tools]]
name = "wechat.upload"
risk = "R2"
description = "Encrypt, upload and send a work-directory file; a naga.v1.WechatUploadRequest"
[tools.params.request]
type = "string"
max_length = 20000

[[tools]]
name = "wechat.qr"
risk = "R0"
description = "Get a QR code or poll its status; a base64 naga.v1.WechatQrRequest"
[tools.params.request]
type = "string"
max_length = 20000
"""


def write_manifest(home_root: str, destinations: list[tuple[str, int]]) -> Installed:
    directory = os.path.join(home_root, "work", "wechat-config")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    egress = "".join(
        f'[[egress]]\nhost = "{host}"\nport = {port}\n\n' for host, port in destinations
    )
    path = os.path.join(directory, "plugin.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(_MANIFEST.format(egress=egress))
    # The core's own manifest, its egress the owner's settings
    # (wechat.api_base, cdn_base): a loopback base (a local iLink stand-in)
    # is the owner's choice, as for the provider's manifest; each connection
    # is still checked by the egress proxy (egress.loopback_hosts).
    return Installed(Manifest.load(path, local_egress=True), directory, shipped=True)


class WechatPlugin:
    """The worker and its calls. ``spawn`` needs the proxy socket first."""

    def __init__(
        self,
        home_root: str,
        installed: Installed,
        *,
        tuning: WorkerTuning,
        report: sandbox.KernelReport,
        forker: sandbox.Forker,
        egress_socket: str,
        note: Callable[[str], Awaitable[None]],
        give_up: Callable[[Worker, str], Awaitable[None]],
    ) -> None:
        self._home_root = home_root
        self._report = report
        self._forker = forker
        self._tuning = tuning
        self._socket = egress_socket
        self.worker = Worker(
            installed,
            spawn=self._spawn,
            tuning=tuning,
            note=note,
            give_up=give_up,
        )

    def _spawn(self, plugin: Installed, fd: int, output: int) -> sandbox.Sandboxed:
        work = os.path.join(self._home_root, "work", "plugins", "wechat")
        os.makedirs(work, mode=0o700, exist_ok=True)
        profile = sandbox.Profile.plugin(
            work_dir=work,
            read_only=[plugin.directory],
            allow_degraded=self._tuning.allow_degraded,
            egress_socket=self._socket,
        )
        return sandbox.launch(
            profile,
            plugin.manifest.entry,
            [str(fd), plugin.manifest_path],
            forker=self._forker,
            pass_fds=[fd],
            env={},
            import_paths=[],
            stdout=output,  # a pipe the core copies into its log, under its name
            stderr=output,
            kernel=self._report,
            ready_timeout=self._tuning.launch_timeout_s,
        )

    async def _call(
        self, tool: str, request: Message, result: type[M], timeout_s: float, **extra: str
    ) -> M:
        arguments = {"request": base64.b64encode(request.SerializeToString()).decode(), **extra}
        try:
            text, _pid = await self.worker.call(tool, json.dumps(arguments), timeout_s)
        except PluginError as exc:
            raise PluginCallFailed(str(exc)) from None
        try:
            value = json.loads(text)
            return result.FromString(base64.b64decode(str(value), validate=True))
        except (ValueError, TypeError, DecodeError) as exc:
            raise PluginCallFailed(f"{tool} answered no {result.DESCRIPTOR.name}: {exc}") from None

    async def poll(self, req: wpb.WechatPollRequest) -> wpb.WechatPollResult:
        # The worker's call timeout bounds it; the long poll itself is shorter.
        return await self._call("wechat.poll", req, wpb.WechatPollResult, 30.0)

    async def send(self, req: wpb.WechatSendRequest) -> wpb.WechatCallResult:
        return await self._call("wechat.send", req, wpb.WechatCallResult, 20.0)

    async def typing(self, req: wpb.WechatTypingRequest) -> wpb.WechatCallResult:
        return await self._call("wechat.typing", req, wpb.WechatCallResult, 15.0)

    async def notify(self, account: wpb.WechatAccount, which: str) -> wpb.WechatCallResult:
        return await self._call("wechat.notify", account, wpb.WechatCallResult, 15.0, which=which)

    async def media(self, req: wpb.WechatMediaRequest) -> wpb.WechatMediaResult:
        return await self._call("wechat.media", req, wpb.WechatMediaResult, 30.0)

    async def upload(self, req: wmpb.WechatUploadRequest) -> wmpb.WechatUploadResult:
        return await self._call("wechat.upload", req, wmpb.WechatUploadResult, 30.0)

    async def qr(self, req: wpb.WechatQrRequest) -> wpb.WechatQrResult:
        return await self._call("wechat.qr", req, wpb.WechatQrResult, 30.0)

    async def run(self) -> None:
        await self.worker.run()

    def stop(self) -> None:
        self.worker.stop()

    async def wait_stopped(self) -> None:
        await self.worker.stopped.wait()


class PluginCallFailed(WechatError):
    """The worker could not answer (crashed, hung, being rebuilt)."""


__all__ = ["PluginCallFailed", "WechatPlugin", "write_manifest"]
