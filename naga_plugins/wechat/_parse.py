"""The iLink server's JSON, checked: what the protocol says each field is,
or a clear reason why a message (or the whole answer) is refused.

The server is untrusted input (SPEC section 7): every field is type-checked,
every string and list bounded. A malformed message is skipped with a line
saying why; the batch's other messages and its cursor still count, so one
bad message cannot wedge a binding.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

from naga.v1 import wechat_pb2 as wpb

MAX_MESSAGES = 200
MAX_ITEMS = 20
MAX_TEXT = 100_000
MAX_ID = 512


class BadAnswer(ValueError):
    """The answer as a whole is not what the protocol says."""


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadAnswer(f"the answer is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadAnswer(f"the answer is a JSON {type(value).__name__}, not an object")
    return cast("dict[str, Any]", value)


def _int(value: object, where: str, *, default: int | None = 0) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        # Some servers send big ids as strings.
        if isinstance(value, str) and value.isdigit() and len(value) <= 20:
            return int(value)
        raise BadAnswer(f"{where} is {type(value).__name__}, not an integer")
    return value


def string_field(value: object, where: str, *, limit: int = MAX_ID) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadAnswer(f"{where} is {type(value).__name__}, not a string")
    if len(value) > limit:
        raise BadAnswer(f"{where} has {len(value)} characters, more than {limit}")
    return value


def _obj(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadAnswer(f"{where} is {type(value).__name__}, not an object")
    return cast("dict[str, Any]", value)


def error_code(answer: dict[str, Any]) -> tuple[int, str]:
    """(ret or errcode, errmsg); (0, "") for success. -14 wins wherever it is."""
    ret = _int(answer.get("ret"), "ret")
    errcode = _int(answer.get("errcode"), "errcode")
    message = string_field(answer.get("errmsg"), "errmsg", limit=2000)
    if -14 in (ret, errcode):
        return -14, message
    return (ret or errcode), message


def _media(raw: object, where: str) -> wpb.WechatMedia:
    m = _obj(raw, where)
    return wpb.WechatMedia(
        encrypt_query_param=string_field(
            m.get("encrypt_query_param"), f"{where}.encrypt_query_param", limit=4096
        ),
        aes_key=string_field(m.get("aes_key"), f"{where}.aes_key", limit=128),
        full_url=string_field(m.get("full_url"), f"{where}.full_url", limit=4096),
    )


def _item(raw: object, where: str) -> wpb.WechatItem:
    it = _obj(raw, where)
    kind = _int(it.get("type"), f"{where}.type")
    item = wpb.WechatItem(type=kind)
    if kind == 1:
        text = _obj(it.get("text_item"), f"{where}.text_item")
        item.text = string_field(text.get("text"), f"{where}.text_item.text", limit=MAX_TEXT)
    elif kind == 2:
        image = _obj(it.get("image_item"), f"{where}.image_item")
        item.media.CopyFrom(_media(image.get("media"), f"{where}.image_item.media"))
        item.media.image_aeskey_hex = string_field(
            image.get("aeskey"), f"{where}.image_item.aeskey", limit=64
        )
        if not item.media.full_url:
            item.media.full_url = string_field(
                image.get("url"), f"{where}.image_item.url", limit=4096
            )
        item.declared_size = _int(image.get("mid_size"), f"{where}.image_item.mid_size")
    elif kind == 3:
        voice = _obj(it.get("voice_item"), f"{where}.voice_item")
        item.media.CopyFrom(_media(voice.get("media"), f"{where}.voice_item.media"))
        item.voice_text = string_field(
            voice.get("text"), f"{where}.voice_item.text", limit=MAX_TEXT
        )
        item.playtime_ms = _int(voice.get("playtime"), f"{where}.voice_item.playtime")
        item.encode_type = _int(voice.get("encode_type"), f"{where}.voice_item.encode_type")
    elif kind == 4:
        file = _obj(it.get("file_item"), f"{where}.file_item")
        item.media.CopyFrom(_media(file.get("media"), f"{where}.file_item.media"))
        item.file_name = string_field(
            file.get("file_name"), f"{where}.file_item.file_name", limit=1024
        )
        # len is the plaintext size as a *string* in the protocol; tolerate an int.
        item.declared_size = _int(file.get("len"), f"{where}.file_item.len")
    elif kind == 5:
        video = _obj(it.get("video_item"), f"{where}.video_item")
        item.media.CopyFrom(_media(video.get("media"), f"{where}.video_item.media"))
        item.declared_size = _int(video.get("video_size"), f"{where}.video_item.video_size")
    return item


def message(raw: object, index: int) -> wpb.WechatMessage:
    where = f"msgs[{index}]"
    m = _obj(raw, where)
    items_raw = m.get("item_list")
    if items_raw is None:
        items_raw = []
    if not isinstance(items_raw, list):
        raise BadAnswer(f"{where}.item_list is {type(items_raw).__name__}, not a list")
    items_list = cast("list[Any]", items_raw)
    if len(items_list) > MAX_ITEMS:
        raise BadAnswer(f"{where}.item_list has {len(items_list)} items, more than {MAX_ITEMS}")
    msg = wpb.WechatMessage(
        seq=max(0, _int(m.get("seq"), f"{where}.seq")),
        message_id=str(_int(m.get("message_id"), f"{where}.message_id"))
        if m.get("message_id") is not None
        else "",
        from_user_id=string_field(m.get("from_user_id"), f"{where}.from_user_id"),
        to_user_id=string_field(m.get("to_user_id"), f"{where}.to_user_id"),
        client_id=string_field(m.get("client_id"), f"{where}.client_id"),
        create_time_ms=_int(m.get("create_time_ms"), f"{where}.create_time_ms"),
        message_type=_int(m.get("message_type"), f"{where}.message_type"),
        context_token=string_field(m.get("context_token"), f"{where}.context_token", limit=4096),
        group_id=string_field(m.get("group_id"), f"{where}.group_id"),
        items=[_item(it, f"{where}.item_list[{i}]") for i, it in enumerate(items_list)],
    )
    if msg.message_id == "0":
        msg.message_id = ""
    if not msg.from_user_id:
        raise BadAnswer(f"{where}.from_user_id is missing")
    digest = hashlib.sha256()
    digest.update(msg.from_user_id.encode())
    digest.update(str(msg.create_time_ms).encode())
    for item in msg.items:
        digest.update(item.SerializeToString(deterministic=True))
    msg.content_hash = digest.hexdigest()
    return msg


def updates(answer: dict[str, Any]) -> wpb.WechatPollResult:
    """A getupdates answer (after the error check): its messages (the bad
    ones skipped, each with a reason) and its cursor."""
    raw = answer.get("msgs")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise BadAnswer(f"msgs is {type(raw).__name__}, not a list")
    listed = cast("list[Any]", raw)
    if len(listed) > MAX_MESSAGES:
        raise BadAnswer(f"msgs has {len(listed)} messages, more than {MAX_MESSAGES}")
    cursor = answer.get("get_updates_buf", answer.get("sync_buf"))
    result = wpb.WechatPollResult(
        cursor=string_field(cursor, "get_updates_buf", limit=65536),
        next_timeout_ms=max(
            0, min(_int(answer.get("longpolling_timeout_ms"), "longpolling_timeout_ms"), 600_000)
        ),
    )
    for index, item in enumerate(listed):
        try:
            result.messages.append(message(item, index))
        except BadAnswer as exc:
            result.skipped.append(str(exc))
    return result


def qr_status(answer: dict[str, Any]) -> wpb.WechatQrResult:
    return wpb.WechatQrResult(
        status=string_field(answer.get("status"), "status", limit=64),
        bot_token=string_field(answer.get("bot_token"), "bot_token", limit=4096),
        bot_id=string_field(answer.get("ilink_bot_id"), "ilink_bot_id"),
        base_url=string_field(answer.get("baseurl"), "baseurl", limit=1024),
        user_id=string_field(answer.get("ilink_user_id"), "ilink_user_id"),
        redirect_host=string_field(answer.get("redirect_host"), "redirect_host", limit=253),
    )


__all__ = [
    "BadAnswer",
    "error_code",
    "message",
    "parse_json",
    "qr_status",
    "string_field",
    "updates",
]
