"""The client's calls of the WechatService: bind, list, unbind."""

from __future__ import annotations

from naga.sdk._rpc import Rpc
from naga.v1 import wechat_media_pb2 as wmpb
from naga.v1 import wechat_pb2 as wpb

_WECHAT = "/naga.v1.WechatService/"
_SLACK_S = 5.0


class WechatCalls(Rpc):
    def wechat_bind(
        self, login_id: str = "", *, verify_code: str = "", wait: float = 25.0
    ) -> wpb.WechatBindResponse:
        """Start a QR login (no ``login_id``) or wait up to ``wait`` seconds
        on one for its next status (``verify_code``: the digits the phone shows)."""
        req = wpb.WechatBindRequest(
            login_id=login_id, verify_code=verify_code, wait_ms=round(wait * 1000)
        )
        return self._write(_WECHAT + "Bind", req, wpb.WechatBindResponse, wait + _SLACK_S + 30)

    def wechat_bindings(self, *, timeout: float | None = None) -> list[wpb.WechatBinding]:
        answer = self._read(
            _WECHAT + "List", wpb.WechatListRequest(), wpb.WechatListResponse, timeout
        )
        return list(answer.bindings)

    def wechat_send_file(
        self,
        bot_id: str,
        to_user_id: str,
        data: bytes,
        *,
        file_name: str = "",
        image: bool = False,
        timeout: float | None = None,
    ) -> wmpb.WechatSendFileResponse:
        """Send an image or a file to a user who wrote to the binding (owner
        only; an irreversible effect). Not retried: a send is not idempotent."""
        req = wmpb.WechatSendFileRequest(
            bot_id=bot_id, to_user_id=to_user_id, data=data, file_name=file_name, image=image
        )
        return self._write(
            "/naga.v1.WechatMediaService/SendFile", req, wmpb.WechatSendFileResponse, timeout
        )

    def wechat_unbind(self, bot_id: str, *, timeout: float | None = None) -> int:
        req = wpb.WechatUnbindRequest(bot_id=bot_id)
        return self._write(_WECHAT + "Unbind", req, wpb.WechatUnbindResponse, timeout).seq
