"""The iLink HTTP calls (ILINK_PROTOCOL.md sections 1-3, 5), through the
core's egress proxy.

Each call returns a checked proto; nothing raises for what the server or
the network did: a stale token is ``STALE``, another non-zero ``ret`` is
``REFUSED`` with its code, an answer that is not the protocol's (not JSON,
wrong types, larger than ``MAX_ANSWER_BYTES``, a redirect, an HTTP error)
is ``BAD_RESPONSE`` with the reason, no answer is ``NETWORK``. Redirects
are never followed: the server's hosts are the plugin's egress, and a
redirect to another host is an error the owner should see.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import urllib.parse
from typing import Any

import httpx

from naga.v1 import wechat_media_pb2 as wmpb
from naga.v1 import wechat_pb2 as wpb
from naga_plugins.wechat import _media, _parse
from naga_plugins.wechat._parse import BadAnswer

#: The client version the headers and base_info claim (2.2.0, as T's doc example).
CLIENT_VERSION = "2.2.0"
CLIENT_VERSION_CODE = str((2 << 16) | (2 << 8) | 0)
BOT_AGENT = "Naga/0.1"
#: The largest API answer read; past it the answer is refused.
MAX_ANSWER_BYTES = 4 << 20
CALL_TIMEOUT_S = 10.0
#: The largest media blob downloaded (T: 100 MB; ours is smaller).
MAX_MEDIA_BYTES = 20 << 20
SEND_TIMEOUT_S = 15.0
#: Tries of one CDN upload (a 5xx, or a 200 without x-encrypted-param).
UPLOAD_ATTEMPTS = 3
FAILED = wpb.WECHAT_FAILURE_BAD_RESPONSE


class _Failed(Exception):
    def __init__(self, failure: wpb.WechatFailure.ValueType, detail: str, code: int = 0) -> None:
        super().__init__(detail)
        self.failure = failure
        self.detail = detail
        self.code = code


def _uin() -> str:
    # A random uint32 as decimal text, then base64 (section 5).
    return base64.b64encode(str(secrets.randbits(32)).encode()).decode()


def _base_info() -> dict[str, str]:
    return {"channel_version": CLIENT_VERSION, "bot_agent": BOT_AGENT}


class ILink:
    """The calls; one httpx client (connections kept) shared by every thread."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self._http = httpx.Client(transport=transport, follow_redirects=False)
        self._tickets: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self._http.close()

    # --- plumbing -------------------------------------------------------------------

    def _request(
        self,
        method: str,
        url: str,
        *,
        token: str = "",
        body: dict[str, Any] | None = None,
        timeout_s: float,
    ) -> dict[str, Any]:
        headers = {"iLink-App-Id": "bot", "iLink-App-ClientVersion": CLIENT_VERSION_CODE}
        if method == "POST":
            headers.update(
                {
                    "Content-Type": "application/json",
                    "AuthorizationType": "ilink_bot_token",
                    "X-WECHAT-UIN": _uin(),
                }
            )
            if token:
                headers["Authorization"] = f"Bearer {token}"
        try:
            with self._http.stream(
                method, url, headers=headers, json=body, timeout=timeout_s
            ) as answer:
                if 300 <= answer.status_code < 400:
                    location = str(answer.headers.get("location", ""))
                    where = urllib.parse.urlsplit(location).netloc
                    raise _Failed(
                        FAILED,
                        f"HTTP {answer.status_code}: a redirect to {where or 'nowhere'!r} "
                        "is not followed",
                    )
                if answer.status_code != 200:
                    raise _Failed(FAILED, f"HTTP {answer.status_code} from {url_path(url)}")
                data = bytearray()
                for chunk in answer.iter_bytes():
                    data += chunk
                    if len(data) > MAX_ANSWER_BYTES:
                        raise _Failed(
                            FAILED, f"the answer is larger than {MAX_ANSWER_BYTES >> 20} MiB"
                        )
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc) or "timed out") from None
        except httpx.HTTPError as exc:
            raise _Failed(wpb.WECHAT_FAILURE_NETWORK, f"{type(exc).__name__}: {exc}") from None
        try:
            return _parse.parse_json(bytes(data))
        except BadAnswer as exc:
            raise _Failed(FAILED, str(exc)) from None

    def _api(
        self, account: wpb.WechatAccount, path: str, body: dict[str, Any], timeout_s: float
    ) -> dict[str, Any]:
        body = {**body, "base_info": _base_info()}
        url = account.base_url.rstrip("/") + "/ilink/bot/" + path
        answer = self._request("POST", url, token=account.token, body=body, timeout_s=timeout_s)
        try:
            code, message = _parse.error_code(answer)
        except BadAnswer as exc:
            raise _Failed(FAILED, str(exc)) from None
        if code == -14:
            raise _Failed(wpb.WECHAT_FAILURE_STALE, message or "session timeout", -14)
        if code != 0:
            raise _Failed(wpb.WECHAT_FAILURE_REFUSED, message or f"ret {code}", code)
        return answer

    # --- the calls --------------------------------------------------------------------

    def poll(self, req: wpb.WechatPollRequest) -> wpb.WechatPollResult:
        timeout_s = max(1.0, req.timeout_ms / 1000)
        try:
            answer = self._api(
                req.account, "getupdates", {"get_updates_buf": req.cursor}, timeout_s
            )
            return _parse.updates(answer)
        except TimeoutError:
            # Normal for a long poll: nothing came; the old cursor stands.
            return wpb.WechatPollResult(timed_out=True)
        except BadAnswer as exc:
            return wpb.WechatPollResult(failure=FAILED, detail=str(exc))
        except _Failed as exc:
            return wpb.WechatPollResult(failure=exc.failure, code=exc.code, detail=exc.detail)

    def send(self, req: wpb.WechatSendRequest) -> wpb.WechatCallResult:
        msg = {
            "from_user_id": "",
            "to_user_id": req.to_user_id,
            "client_id": req.client_id,
            "message_type": 2,
            "message_state": 2,
            "item_list": [{"type": 1, "text_item": {"text": req.text}}],
            "context_token": req.context_token,
        }
        return self._call(req.account, "sendmessage", {"msg": msg}, SEND_TIMEOUT_S)

    def typing(self, req: wpb.WechatTypingRequest) -> wpb.WechatCallResult:
        key = (req.account.bot_id, req.to_user_id)
        try:
            with self._lock:
                ticket = self._tickets.get(key)
            if ticket is None:
                body: dict[str, Any] = {"ilink_user_id": req.to_user_id}
                if req.context_token:
                    body["context_token"] = req.context_token
                answer = self._api(req.account, "getconfig", body, CALL_TIMEOUT_S)
                ticket = _required(answer, "typing_ticket", "getconfig")
                with self._lock:
                    self._tickets[key] = ticket
            self._api(
                req.account,
                "sendtyping",
                {"ilink_user_id": req.to_user_id, "typing_ticket": ticket, "status": req.status},
                CALL_TIMEOUT_S,
            )
        except TimeoutError:
            return wpb.WechatCallResult(failure=wpb.WECHAT_FAILURE_NETWORK, detail="timed out")
        except _Failed as exc:
            if exc.failure is not wpb.WECHAT_FAILURE_NETWORK:
                with self._lock:
                    self._tickets.pop(key, None)  # a new ticket next time
            return wpb.WechatCallResult(failure=exc.failure, code=exc.code, detail=exc.detail)
        return wpb.WechatCallResult()

    def notify(self, account: wpb.WechatAccount, which: str) -> wpb.WechatCallResult:
        return self._call(account, f"msg/notify{which}", {}, CALL_TIMEOUT_S)

    def _call(
        self, account: wpb.WechatAccount, path: str, body: dict[str, Any], timeout_s: float
    ) -> wpb.WechatCallResult:
        try:
            self._api(account, path, body, timeout_s)
        except TimeoutError:
            return wpb.WechatCallResult(failure=wpb.WECHAT_FAILURE_NETWORK, detail="timed out")
        except _Failed as exc:
            return wpb.WechatCallResult(failure=exc.failure, code=exc.code, detail=exc.detail)
        return wpb.WechatCallResult()

    def media(self, req: wpb.WechatMediaRequest, work_dir: str) -> wpb.WechatMediaResult:
        item = req.item
        url = item.media.full_url
        if not url:
            if not item.media.encrypt_query_param:
                return wpb.WechatMediaResult(failure=FAILED, detail="the media has no address")
            query = urllib.parse.quote(item.media.encrypt_query_param, safe="")
            url = req.account.cdn_base.rstrip("/") + "/download?encrypted_query_param=" + query
        limit = req.max_bytes or MAX_MEDIA_BYTES
        try:
            blob = self._download(url, limit)
            key = _media.key_of(item)
            plain = _media.decrypt(key, blob)
            _media.check(item, blob, plain)
            return _media.store(work_dir, plain, item)
        except TimeoutError:
            return wpb.WechatMediaResult(failure=wpb.WECHAT_FAILURE_NETWORK, detail="timed out")
        except _Failed as exc:
            return wpb.WechatMediaResult(failure=exc.failure, detail=exc.detail)
        except _media.MediaRefused as exc:
            return wpb.WechatMediaResult(failure=FAILED, detail=str(exc))

    def _download(self, url: str, limit: int) -> bytes:
        try:
            with self._http.stream("GET", url, timeout=SEND_TIMEOUT_S) as answer:
                if answer.status_code != 200:
                    raise _Failed(FAILED, f"HTTP {answer.status_code} from the CDN")
                data = bytearray()
                for chunk in answer.iter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise _Failed(FAILED, f"the media is larger than {limit} bytes")
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc) or "timed out") from None
        except httpx.HTTPError as exc:
            raise _Failed(wpb.WECHAT_FAILURE_NETWORK, f"{type(exc).__name__}: {exc}") from None
        return bytes(data)

    def upload(self, req: wmpb.WechatUploadRequest, work_dir: str) -> wmpb.WechatUploadResult:
        """Encrypt the file, ask for an upload slot, post it to the CDN and
        send it (ILINK_PROTOCOL.md section 4, "Upload" and "Outbound media")."""
        try:
            plain = _media.read_outbound(work_dir, req.file, MAX_MEDIA_BYTES)
        except _media.MediaRefused as exc:
            return wmpb.WechatUploadResult(failure=FAILED, detail=str(exc))
        key = secrets.token_bytes(16)
        cipher = _media.encrypt(key, plain)
        md5 = hashlib.md5(plain).hexdigest()
        filekey = secrets.token_hex(16)
        done = wmpb.WechatUploadResult(size=len(plain), md5=md5, encrypted_size=len(cipher))
        try:
            slot = self._api(
                req.account,
                "getuploadurl",
                {
                    "filekey": filekey,
                    "media_type": 1 if req.image else 3,
                    "to_user_id": req.to_user_id,
                    "rawsize": len(plain),
                    "rawfilemd5": md5,
                    "filesize": len(cipher),
                    "no_need_thumb": True,
                    "aeskey": key.hex(),
                },
                SEND_TIMEOUT_S,
            )
            param = self._post_cdn(req.account, slot, filekey, cipher)
            media = {
                "encrypt_query_param": param,
                # T's encoding: base64 of the 32 hex characters.
                "aes_key": base64.b64encode(key.hex().encode("ascii")).decode("ascii"),
                "encrypt_type": 1,
            }
            if req.image:
                item = {"type": 2, "image_item": {"media": media, "mid_size": len(cipher)}}
            else:
                name = req.file_name or "file"
                item = {
                    "type": 4,
                    "file_item": {"media": media, "file_name": name, "len": str(len(plain))},
                }
            msg = {
                "from_user_id": "",
                "to_user_id": req.to_user_id,
                "client_id": req.client_id,
                "message_type": 2,
                "message_state": 2,
                "item_list": [item],
                "context_token": req.context_token,
            }
            self._api(req.account, "sendmessage", {"msg": msg}, SEND_TIMEOUT_S)
        except TimeoutError:
            done.failure, done.detail = wpb.WECHAT_FAILURE_NETWORK, "timed out"
        except _Failed as exc:
            done.failure, done.code, done.detail = exc.failure, exc.code, exc.detail
        return done

    def _post_cdn(
        self, account: wpb.WechatAccount, slot: dict[str, Any], filekey: str, cipher: bytes
    ) -> str:
        """The ciphertext posted; the ``x-encrypted-param`` the CDN answered.
        A 4xx fails at once (``x-error-message``); a 5xx or a 200 without the
        header is tried again, three times in all."""
        full = slot.get("upload_full_url")
        param = slot.get("upload_param")
        if isinstance(full, str) and full:
            url = full
        elif isinstance(param, str) and param and len(param) <= 4096:
            query = urllib.parse.urlencode({"encrypted_query_param": param, "filekey": filekey})
            url = account.cdn_base.rstrip("/") + "/upload?" + query
        else:
            raise _Failed(FAILED, "getuploadurl gave neither upload_full_url nor upload_param")
        why = ""
        for _ in range(UPLOAD_ATTEMPTS):
            try:
                answer = self._http.post(
                    url,
                    content=cipher,
                    headers={"Content-Type": "application/octet-stream"},
                    timeout=SEND_TIMEOUT_S,
                )
            except httpx.TimeoutException as exc:
                raise TimeoutError(str(exc) or "timed out") from None
            except httpx.HTTPError as exc:
                raise _Failed(wpb.WECHAT_FAILURE_NETWORK, f"{type(exc).__name__}: {exc}") from None
            stored = answer.headers.get("x-encrypted-param", "")
            if answer.status_code == 200 and stored:
                return str(stored)[:4096]
            if 300 <= answer.status_code < 500:
                told = str(answer.headers.get("x-error-message", ""))[:200]
                raise _Failed(
                    FAILED, f"the CDN refused the upload (HTTP {answer.status_code}: {told})"
                )
            why = f"HTTP {answer.status_code}" + ("" if stored else " without x-encrypted-param")
        raise _Failed(FAILED, f"the CDN upload failed {UPLOAD_ATTEMPTS} times ({why})")

    def qr(self, req: wpb.WechatQrRequest) -> wpb.WechatQrResult:
        base = req.api_base.rstrip("/") + "/ilink/bot/"
        try:
            if not req.qrcode:
                answer = self._request(
                    "POST",
                    base + "get_bot_qrcode?bot_type=3",
                    body={"local_token_list": []},
                    timeout_s=CALL_TIMEOUT_S,
                )
                code = _required(answer, "qrcode", "get_bot_qrcode")
                url = _required(answer, "qrcode_img_content", "get_bot_qrcode")
                return wpb.WechatQrResult(qrcode=code, url=url, status="wait")
            query = {"qrcode": req.qrcode}
            if req.verify_code:
                query["verify_code"] = req.verify_code
            url = base + "get_qrcode_status?" + urllib.parse.urlencode(query)
            timeout_s = max(1.0, req.timeout_ms / 1000)
            answer = self._request("GET", url, timeout_s=timeout_s)
            return _parse.qr_status(answer)
        except TimeoutError:
            return wpb.WechatQrResult(status="wait")
        except BadAnswer as exc:
            return wpb.WechatQrResult(failure=FAILED, detail=str(exc))
        except _Failed as exc:
            return wpb.WechatQrResult(failure=exc.failure, detail=exc.detail)


def _required(answer: dict[str, Any], name: str, call: str) -> str:
    found = answer.get(name)
    if not isinstance(found, str) or not found or len(found) > 4096:
        raise _Failed(FAILED, f"{call} gave no usable {name}")
    return found


def url_path(url: str) -> str:
    return urllib.parse.urlsplit(url).path


__all__ = ["ILink", "url_path"]
