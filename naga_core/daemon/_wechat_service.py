"""``naga.v1.WechatService`` on the core's bridge (proto/naga/v1/wechat.proto):
the owner binds, lists and unbinds WeChat accounts (``naga wechat ...``)."""

from __future__ import annotations

from naga.constants import WECHAT_SEND_MAX_BYTES
from naga.v1 import core_pb2 as cpb
from naga.v1 import wechat_media_pb2 as wmpb
from naga.v1 import wechat_pb2 as wpb
from naga_core.daemon import _checks
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import AsyncUnary, Method, Unary
from naga_core.daemon._errors import RequestRefused
from naga_core.daemon._plugin_service import worker_row
from naga_core.wechat import WechatChannel

WECHAT_SERVICE = "naga.v1.WechatService"
WECHAT_MEDIA_SERVICE = "naga.v1.WechatMediaService"
MAX_SEND_BYTES = WECHAT_SEND_MAX_BYTES
MAX_WAIT_MS = 60_000


def check_bind(req: wpb.WechatBindRequest) -> None:
    _checks.text("login_id", req.login_id, max_chars=256, required=False)
    _checks.text("verify_code", req.verify_code, max_chars=16, required=False)
    if req.verify_code and not req.verify_code.isdigit():
        raise RequestRefused.invalid("verify_code must be the digits shown on the phone")
    if req.wait_ms > MAX_WAIT_MS:
        raise RequestRefused.invalid(f"wait_ms {req.wait_ms} is above {MAX_WAIT_MS}")


def check_send_file(req: wmpb.WechatSendFileRequest) -> None:
    _checks.text("bot_id", req.bot_id, max_chars=256)
    _checks.text("to_user_id", req.to_user_id, max_chars=256)
    _checks.text("file_name", req.file_name, max_chars=200, required=not req.image)
    if not req.data:
        raise RequestRefused.invalid("data is empty: there is nothing to send")
    if len(req.data) > MAX_SEND_BYTES:
        raise RequestRefused.invalid(
            f"data is {len(req.data)} bytes; at most {MAX_SEND_BYTES} are sent this way"
        )


def check_unbind(req: wpb.WechatUnbindRequest) -> None:
    _checks.text("bot_id", req.bot_id, max_chars=256)


class WechatServicer:
    def __init__(self, channel: WechatChannel) -> None:
        self._channel = channel

    def methods(self) -> list[Method]:
        return [
            AsyncUnary("Bind", wpb.WechatBindRequest, self.bind, check_bind),
            Unary("List", wpb.WechatListRequest, self.list),
            AsyncUnary("Unbind", wpb.WechatUnbindRequest, self.unbind, check_unbind),
        ]

    async def bind(self, _p: Principal, req: wpb.WechatBindRequest) -> wpb.WechatBindResponse:
        return await self._channel.bind(req)

    def list(self, _p: Principal, _req: wpb.WechatListRequest) -> wpb.WechatListResponse:
        return wpb.WechatListResponse(bindings=self._channel.bindings())

    async def unbind(self, _p: Principal, req: wpb.WechatUnbindRequest) -> wpb.WechatUnbindResponse:
        return wpb.WechatUnbindResponse(seq=await self._channel.unbind(req.bot_id))


class WechatMediaServicer:
    def __init__(self, channel: WechatChannel) -> None:
        self._channel = channel

    def methods(self) -> list[Method]:
        return [AsyncUnary("SendFile", wmpb.WechatSendFileRequest, self.send_file, check_send_file)]

    async def send_file(
        self, _p: Principal, req: wmpb.WechatSendFileRequest
    ) -> wmpb.WechatSendFileResponse:
        return await self._channel.send_file(req)


def wechat_rows(channel: WechatChannel) -> list[cpb.ProcessStatus]:
    """The WeChat plugin's worker, once it was started, for SupervisorService.Status."""
    worker = channel.worker
    return [] if worker is None else [worker_row(worker, "plugin:wechat")]


__all__ = [
    "WECHAT_MEDIA_SERVICE",
    "WECHAT_SERVICE",
    "WechatMediaServicer",
    "WechatServicer",
    "wechat_rows",
]
