"""The WeChat channel plugin: the core's iLink client (docs/design/wechat.md).

A sandboxed worker with no network of its own: every call goes through the
core's egress proxy to the iLink API and CDN hosts (the settings
``wechat.api_base`` and ``wechat.cdn_base``, which the manifest the core
writes declares). It holds no state the core needs: the core passes the
account (token, base URL) with each call over the plugin's token-gated
socket pair and keeps cursors, context tokens and what was sent. Each tool
takes one base64 ``naga.v1.Wechat*Request`` and answers one base64 result;
failures of the server or the network are results, never exceptions.
"""

from __future__ import annotations

import base64
import binascii
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from naga.v1 import wechat_media_pb2 as wmpb
from naga.v1 import wechat_pb2 as wpb
from naga_plugins._egress import egress_transport
from naga_plugins._plugin import Plugin
from naga_plugins.errors import ToolFailed
from naga_plugins.wechat._ilink import ILink

WECHAT_PLUGIN = "wechat"
M = TypeVar("M", bound=Message)

plugin = Plugin(WECHAT_PLUGIN)
_client: list[ILink] = []


def _ilink() -> ILink:
    # Made at the first call, inside the sandbox (the proxy's socket is there).
    if not _client:
        _client.append(ILink(egress_transport()))
    return _client[0]


def _decode(kind: type[M], text: str) -> M:
    try:
        return kind.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError) as exc:
        raise ToolFailed(
            f"the request is not a base64 {kind.DESCRIPTOR.full_name}: {exc}"
        ) from None


def _encode(message: Message) -> str:
    return base64.b64encode(message.SerializeToString()).decode("ascii")


@plugin.tool("wechat.poll")
def poll(request: str) -> str:
    return _encode(_ilink().poll(_decode(wpb.WechatPollRequest, request)))


@plugin.tool("wechat.send")
def send(request: str) -> str:
    return _encode(_ilink().send(_decode(wpb.WechatSendRequest, request)))


@plugin.tool("wechat.typing")
def typing(request: str) -> str:
    return _encode(_ilink().typing(_decode(wpb.WechatTypingRequest, request)))


@plugin.tool("wechat.notify")
def notify(request: str, which: str) -> str:
    if which not in ("start", "stop"):
        raise ToolFailed(f"which must be 'start' or 'stop', not {which!r}")
    return _encode(_ilink().notify(_decode(wpb.WechatAccount, request), which))


@plugin.tool("wechat.media")
def media(request: str) -> str:
    return _encode(_ilink().media(_decode(wpb.WechatMediaRequest, request), Plugin.work_dir()))


@plugin.tool("wechat.upload")
def upload(request: str) -> str:
    req = _decode(wmpb.WechatUploadRequest, request)
    return _encode(_ilink().upload(req, Plugin.work_dir()))


@plugin.tool("wechat.qr")
def qr(request: str) -> str:
    return _encode(_ilink().qr(_decode(wpb.WechatQrRequest, request)))


main = plugin.main

__all__ = ["WECHAT_PLUGIN", "main", "plugin"]
