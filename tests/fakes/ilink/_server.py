"""A fake iLink bot server: the routes of ILINK_PROTOCOL.md over real HTTP
on 127.0.0.1, with the state a test scripts and inspects.

Faithful where the protocol doc is sure, configurable where it is not:

* QR login: ``get_bot_qrcode`` (GET and POST), the long-polling
  ``get_qrcode_status`` held until the status changes (or ``hold_s``),
  scripted by the test: scanned, a verify code asked (three wrong codes:
  ``verify_code_blocked``), expired, confirmed (a bot token, bot id,
  ``baseurl``, the scanning user's id).
* ``getupdates``: held until a message is queued or ``hold_s``; an opaque
  cursor; at-least-once (the old cursor redelivers; ``redeliver`` replays a
  message later, as the real server does after ~1 s or 30-50 min).
* Business errors are HTTP 200 with ``ret``/``errcode``: a missing or
  revoked token is -14 ``session timeout``; a send without a valid
  ``context_token``, past the reply window, to another user, or an 11th
  reply to one inbound message is -2. ``sendmessage`` is idempotent on
  ``client_id`` (what makes a -2 retry with the same id safe; the real
  server's behaviour here is unconfirmed). Text past ``truncate_at`` code
  points is cut, as users report.
* Typing: ``getconfig`` gives a ticket per user, ``sendtyping`` is
  recorded as a timeline.
* CDN: ``getuploadurl`` + ``/c2c/upload`` (checks size, padding and MD5 of
  the AES-128-ECB ciphertext, answers ``x-encrypted-param``) and
  ``/c2c/download``.
* Faults: ``inject(route, Response)`` answers the next request of a route
  with exactly that (malformed JSON, wrong types, huge bodies, a redirect).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import h11
import trio

from tests.fakes.ilink import _crypto
from tests.fakes.ilink._http import Request, Response, receive, send

API = "/ilink/bot/"
STALE = {"ret": -14, "errcode": -14, "errmsg": "session timeout"}


def _json(value: object) -> Response:
    return Response(body=json.dumps(value, ensure_ascii=False).encode())


@dataclass
class Sent:
    bot_id: str
    user: str
    client_id: str
    kind: int
    text: str
    at: float
    item: dict[str, Any]


@dataclass
class Typing:
    bot_id: str
    user: str
    status: int
    at: float


@dataclass
class Context:
    token: str
    bot_id: str
    user: str
    message_id: int
    issued: float
    replies: int = 0


@dataclass
class Bot:
    bot_id: str
    token: str
    owner: str
    revoked: bool = False
    log: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    changed: trio.Event = field(default_factory=trio.Event)
    tickets: dict[str, str] = field(default_factory=dict[str, str])
    polls: int = 0

    def wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


@dataclass
class QR:
    code: str
    status: str = "wait"
    verify_code: str = ""
    wrong_codes: int = 0
    user: str = ""
    bot_id: str = ""
    changed: trio.Event = field(default_factory=trio.Event)
    polls: list[str] = field(default_factory=list[str])

    def move(self, status: str) -> None:
        self.status = status
        self.changed.set()
        self.changed = trio.Event()


class FakeILink:
    """The server; ``await nursery.start(server.serve)``."""

    def __init__(
        self,
        *,
        hold_s: float = 35.0,
        reply_window_s: float = 24 * 3600.0,
        max_replies: int = 10,
        truncate_at: int = 2000,
        batch: int = 10,
    ) -> None:
        self.hold_s = hold_s
        self.reply_window_s = reply_window_s
        self.max_replies = max_replies
        self.truncate_at = truncate_at
        self.batch = batch
        self.port = 0
        self.bots: dict[str, Bot] = {}
        self.by_token: dict[str, Bot] = {}
        self.qrs: dict[str, QR] = {}
        self.contexts: dict[str, Context] = {}
        self.sent: list[Sent] = []
        self.sent_ids: set[str] = set()
        self.duplicate_sends: list[str] = []
        self.refused_sends: list[tuple[str, int, str]] = []
        self.typing: list[Typing] = []
        self.notified: list[tuple[str, str]] = []
        self.requests: list[Request] = []
        self.faults: dict[str, deque[Response]] = {}
        self.media: dict[str, bytes] = {}
        self.uploads: dict[str, dict[str, Any]] = {}
        self._seq = 0
        self._msg_id = 7_000_000_000_000_000_000  # above 2^53, as real ids are
        self.sent_changed = trio.Event()
        #: Set and renewed on every request's arrival and answer.
        self.activity = trio.Event()

    def pulse(self) -> None:
        self.activity.set()
        self.activity = trio.Event()

    # --- addresses -----------------------------------------------------------------

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cdn(self) -> str:
        return self.base + "/c2c"

    # --- what a test scripts ----------------------------------------------------------

    def account(self, owner: str) -> Bot:
        """A bot bound by ``owner`` (without the QR dance); an earlier bot of
        the same owner is revoked (its calls get -14 from now on)."""
        for other in self.bots.values():
            if other.owner == owner and not other.revoked:
                self.revoke(other.bot_id)
        bot = Bot(secrets.token_hex(8) + "@im.bot", secrets.token_urlsafe(24), owner)
        self.bots[bot.bot_id] = bot
        self.by_token[bot.token] = bot
        return bot

    def revoke(self, bot_id: str) -> None:
        bot = self.bots[bot_id]
        bot.revoked = True
        bot.wake()

    def qr(self, code: str | None = None) -> QR:
        """The newest QR code (or ``code``)."""
        if code is None:
            return list(self.qrs.values())[-1]
        return self.qrs[code]

    def scan(self, code: str) -> None:
        self.qrs[code].move("scaned")

    def ask_code(self, code: str, verify_code: str) -> None:
        qr = self.qrs[code]
        qr.verify_code = verify_code
        qr.move("need_verifycode")

    def expire(self, code: str) -> None:
        self.qrs[code].move("expired")

    def confirm(self, code: str, user: str) -> Bot:
        qr = self.qrs[code]
        bot = self.account(user)
        qr.user, qr.bot_id = user, bot.bot_id
        qr.move("confirmed")
        return bot

    def user_says(self, bot_id: str, user: str, text: str, **extra: Any) -> dict[str, Any]:
        return self.user_sends(bot_id, user, [{"type": 1, "text_item": {"text": text}}], **extra)

    def user_sends(
        self, bot_id: str, user: str, items: list[dict[str, Any]], **extra: Any
    ) -> dict[str, Any]:
        """Queue one inbound message (a fresh context token with it)."""
        bot = self.bots[bot_id]
        self._seq += 1
        self._msg_id += 1
        token = secrets.token_urlsafe(16)
        self.contexts[token] = Context(token, bot_id, user, self._msg_id, trio.current_time())
        now_ms = int(trio.current_time() * 1000)
        message: dict[str, Any] = {
            "seq": self._seq,
            "message_id": self._msg_id,
            "from_user_id": user,
            "to_user_id": bot_id,
            "client_id": f"wx-{secrets.token_hex(6)}",
            "create_time_ms": now_ms,
            "update_time_ms": now_ms,
            "session_id": f"s-{user}",
            "message_type": 1,
            "message_state": 2,
            "item_list": items,
            "context_token": token,
        }
        message.update(extra)
        bot.log.append(message)
        bot.wake()
        return message

    def bot_echo(self, bot_id: str, text: str) -> None:
        """A message from the bot itself (the client must drop it)."""
        bot = self.bots[bot_id]
        self._seq += 1
        self._msg_id += 1
        bot.log.append(
            {
                "seq": self._seq,
                "message_id": self._msg_id,
                "from_user_id": bot_id,
                "to_user_id": bot.owner,
                "message_type": 2,
                "message_state": 2,
                "item_list": [{"type": 1, "text_item": {"text": text}}],
            }
        )
        bot.wake()

    def redeliver(self, bot_id: str, message: dict[str, Any]) -> None:
        """Deliver ``message`` again, later in the stream (at-least-once)."""
        bot = self.bots[bot_id]
        bot.log.append(dict(message))
        bot.wake()

    def inject(self, route: str, *responses: Response) -> None:
        """Answer the next requests of ``route`` (e.g. ``"getupdates"``) with these."""
        self.faults.setdefault(route, deque()).extend(responses)

    def media_item(
        self,
        plaintext: bytes,
        *,
        kind: int,
        key_form: str,
        key: bytes | None = None,
        **payload: Any,
    ) -> dict[str, Any]:
        """An inbound media item whose ciphertext is on the CDN; the key in
        ``media.aes_key`` as ``key_form`` ("raw" or "hex"), or none at all
        (``key_form="none"``: the blob is plaintext)."""
        key = key or secrets.token_bytes(16)
        param = secrets.token_urlsafe(12)
        media: dict[str, Any] = {"encrypt_query_param": param, "encrypt_type": 1}
        if key_form == "none":
            self.media[param] = plaintext
        else:
            self.media[param] = _crypto.encrypt(key, plaintext)
            media["aes_key"] = _crypto.key_field(key, key_form)
        names = {2: "image_item", 3: "voice_item", 4: "file_item", 5: "video_item"}
        return {"type": kind, names[kind]: {"media": media, **payload}}

    def expire_context(self, token: str) -> None:
        self.contexts[token].issued -= self.reply_window_s + 1

    def texts_to(self, user: str) -> list[str]:
        return [s.text for s in self.sent if s.user == user and s.kind == 1]

    async def wait_sent(self, count: int) -> None:
        while len(self.sent) < count:
            await self.sent_changed.wait()

    # --- serving -------------------------------------------------------------------

    async def serve(self, port: int = 0, *, task_status: trio.TaskStatus[FakeILink]) -> None:
        async with trio.open_nursery() as nursery:
            serve = partial(trio.serve_tcp, self._connection, port, host="127.0.0.1")
            listeners = cast("list[trio.SocketListener]", await nursery.start(serve))
            self.port = cast("tuple[str, int]", listeners[0].socket.getsockname())[1]
            task_status.started(self)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 << 10)
        try:
            while True:
                request = await receive(stream, conn)
                if request is None:
                    return
                self.requests.append(request)
                self.pulse()
                response = await self._route(request)
                self.pulse()
                await send(stream, conn, response)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return
        finally:
            await stream.aclose()

    async def _route(self, request: Request) -> Response:
        path = request.path
        if path.startswith("/c2c/"):
            name = path[len("/c2c/") :]
        elif path.startswith(API):
            name = path[len(API) :]
        else:
            return Response(404, b"no such route", "text/plain")
        queued = self.faults.get(name)
        if queued:
            return queued.popleft()
        handler = self._routes().get(name)
        if handler is None:
            return Response(404, b"no such route", "text/plain")
        return await handler(request)

    def _routes(self) -> dict[str, Callable[[Request], Any]]:
        return {
            "get_bot_qrcode": self._get_qrcode,
            "get_qrcode_status": self._qrcode_status,
            "getupdates": self._getupdates,
            "sendmessage": self._sendmessage,
            "getconfig": self._getconfig,
            "sendtyping": self._sendtyping,
            "msg/notifystart": partial(self._notify, "start"),
            "msg/notifystop": partial(self._notify, "stop"),
            "getuploadurl": self._getuploadurl,
            "upload": self._upload,
            "download": self._download,
        }

    # --- routes ---------------------------------------------------------------------

    def _bot(self, request: Request) -> Bot | None:
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or request.headers.get("authorizationtype") != (
            "ilink_bot_token"
        ):
            return None
        bot = self.by_token.get(auth[len("Bearer ") :])
        return None if bot is None or bot.revoked else bot

    @staticmethod
    def _body(request: Request) -> dict[str, Any] | None:
        try:
            value = json.loads(request.body or b"{}")
        except ValueError:
            return None
        return cast("dict[str, Any]", value) if isinstance(value, dict) else None

    async def _get_qrcode(self, request: Request) -> Response:
        if request.query.get("bot_type") != "3":
            return _json({"ret": -1, "errmsg": "bot_type"})
        code = secrets.token_urlsafe(12)
        self.qrs[code] = QR(code)
        return _json(
            {"qrcode": code, "qrcode_img_content": f"https://liteapp.weixin.qq.com/q/{code}"}
        )

    async def _qrcode_status(self, request: Request) -> Response:
        qr = self.qrs.get(request.query.get("qrcode", ""))
        if qr is None:
            return _json({"status": "expired"})
        code = request.query.get("verify_code")
        qr.polls.append(code or "")
        if code is not None and qr.status == "need_verifycode":
            if code == qr.verify_code:
                qr.move("scaned")
            else:
                qr.wrong_codes += 1
                if qr.wrong_codes >= 3:
                    qr.move("verify_code_blocked")
        seen = qr.status
        if seen in ("wait", "scaned"):
            with trio.move_on_after(self.hold_s):
                while qr.status == seen:
                    await qr.changed.wait()
        answer: dict[str, Any] = {"status": qr.status}
        if qr.status == "confirmed":
            bot = self.bots[qr.bot_id]
            answer.update(
                bot_token=bot.token,
                ilink_bot_id=bot.bot_id,
                baseurl=self.base,
                ilink_user_id=qr.user,
            )
        return _json(answer)

    def _cursor(self, bot: Bot, position: int) -> str:
        raw = json.dumps({"b": bot.bot_id, "p": position, "n": secrets.token_hex(4)})
        return base64.urlsafe_b64encode(raw.encode()).decode()

    def _position(self, bot: Bot, cursor: str) -> int:
        if not cursor:
            return 0
        try:
            raw = json.loads(base64.urlsafe_b64decode(cursor.encode()))
            if raw["b"] == bot.bot_id and isinstance(raw["p"], int):
                return raw["p"]
        except (ValueError, KeyError, TypeError):
            pass
        return 0  # an unknown cursor restarts the stream

    async def _getupdates(self, request: Request) -> Response:
        bot = self._bot(request)
        body = self._body(request)
        if bot is None:
            return _json(STALE)
        if body is None or "base_info" not in body:
            return _json({"ret": -1, "errmsg": "bad request"})
        bot.polls += 1
        cursor = body.get("get_updates_buf", body.get("sync_buf", ""))
        position = self._position(bot, cursor if isinstance(cursor, str) else "")
        with trio.move_on_after(self.hold_s):
            while len(bot.log) <= position and not bot.revoked:
                await bot.changed.wait()
        if bot.revoked:
            return _json(STALE)
        msgs = bot.log[position : position + self.batch]
        return _json(
            {
                "ret": 0,
                "msgs": msgs,
                "get_updates_buf": self._cursor(bot, position + len(msgs)),
                "longpolling_timeout_ms": int(self.hold_s * 1000),
            }
        )

    async def _sendmessage(self, request: Request) -> Response:
        bot = self._bot(request)
        body = self._body(request)
        if bot is None:
            return _json(STALE)
        msg = body.get("msg") if body else None
        if not isinstance(msg, dict):
            return _json({"ret": -1, "errmsg": "no msg"})
        msg = cast("dict[str, Any]", msg)
        items = msg.get("item_list")
        client_id = msg.get("client_id")
        user = msg.get("to_user_id")
        if (
            not isinstance(items, list)
            or len(cast("list[Any]", items)) != 1
            or not isinstance(client_id, str)
            or not client_id
            or not isinstance(user, str)
            or msg.get("message_type") != 2
        ):
            return _json({"ret": -1, "errmsg": "bad msg"})
        if client_id in self.sent_ids:
            self.duplicate_sends.append(client_id)
            return _json({"ret": 0, "errmsg": ""})
        context = self.contexts.get(msg.get("context_token") or "")
        stale = context is None or trio.current_time() - context.issued > self.reply_window_s
        if stale or context is None or context.user != user or context.bot_id != bot.bot_id:
            self.refused_sends.append((client_id, -2, "context"))
            return _json({"ret": -2, "errmsg": ""})
        if context.replies >= self.max_replies:
            self.refused_sends.append((client_id, -2, "limit"))
            return _json({"ret": -2, "errmsg": ""})
        item = cast("dict[str, Any]", cast("list[Any]", items)[0])
        kind = item.get("type")
        text = ""
        if kind == 1:
            text = str(cast("dict[str, Any]", item.get("text_item") or {}).get("text", ""))
            text = text[: self.truncate_at]
        context.replies += 1
        self.sent_ids.add(client_id)
        self.sent.append(
            Sent(bot.bot_id, user, client_id, int(kind or 0), text, trio.current_time(), item)
        )
        self.sent_changed.set()
        self.sent_changed = trio.Event()
        return _json({"ret": 0, "errmsg": ""})

    async def _getconfig(self, request: Request) -> Response:
        bot = self._bot(request)
        body = self._body(request)
        if bot is None:
            return _json(STALE)
        user = body.get("ilink_user_id") if body else None
        if not isinstance(user, str):
            return _json({"ret": -1, "errmsg": "ilink_user_id"})
        ticket = bot.tickets.setdefault(user, base64.b64encode(secrets.token_bytes(12)).decode())
        return _json({"ret": 0, "errmsg": "", "typing_ticket": ticket})

    async def _sendtyping(self, request: Request) -> Response:
        bot = self._bot(request)
        body = self._body(request) or {}
        if bot is None:
            return _json(STALE)
        user = body.get("ilink_user_id")
        if not isinstance(user, str) or bot.tickets.get(user) != body.get("typing_ticket"):
            return _json({"ret": -1, "errmsg": "typing_ticket"})
        status = body.get("status")
        if status not in (1, 2):
            return _json({"ret": -1, "errmsg": "status"})
        self.typing.append(Typing(bot.bot_id, user, int(status), trio.current_time()))
        return _json({"ret": 0, "errmsg": ""})

    async def _notify(self, which: str, request: Request) -> Response:
        bot = self._bot(request)
        if bot is None:
            return _json(STALE)
        self.notified.append((bot.bot_id, which))
        return _json({"ret": 0, "errmsg": ""})

    async def _getuploadurl(self, request: Request) -> Response:
        bot = self._bot(request)
        body = self._body(request) or {}
        if bot is None:
            return _json(STALE)
        need = (
            "filekey",
            "media_type",
            "to_user_id",
            "rawsize",
            "rawfilemd5",
            "filesize",
            "aeskey",
        )
        if any(k not in body for k in need) or len(str(body["aeskey"])) != 32:
            return _json({"ret": -1, "errmsg": "bad upload request"})
        param = secrets.token_urlsafe(12)
        self.uploads[param] = dict(body)
        return _json({"upload_param": param})

    async def _upload(self, request: Request) -> Response:
        param = request.query.get("encrypted_query_param", "")
        spec = self.uploads.pop(param, None)
        if spec is None or request.query.get("filekey") != spec["filekey"]:
            return Response(400, headers=(("x-error-message", "unknown upload"),))
        if len(request.body) != spec["filesize"]:
            return Response(400, headers=(("x-error-message", "size mismatch"),))
        try:
            plain = _crypto.decrypt(bytes.fromhex(spec["aeskey"]), request.body)
        except ValueError:
            return Response(400, headers=(("x-error-message", "bad padding"),))
        if len(plain) != spec["rawsize"] or hashlib.md5(plain).hexdigest() != spec["rawfilemd5"]:
            return Response(400, headers=(("x-error-message", "md5 mismatch"),))
        stored = secrets.token_urlsafe(12)
        self.media[stored] = request.body
        return Response(200, b"", headers=(("x-encrypted-param", stored),))

    async def _download(self, request: Request) -> Response:
        blob = self.media.get(request.query.get("encrypted_query_param", ""))
        if blob is None:
            return Response(404, b"", "application/octet-stream")
        return Response(200, blob, "application/octet-stream")
