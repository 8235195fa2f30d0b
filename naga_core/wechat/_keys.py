"""Names the channel derives from iLink ids: the dedupe key of a message,
the session and peer id of a (binding, user), reply part client ids, and
what an inbound message says to the model."""

from __future__ import annotations

import hashlib
import re

from naga.v1 import wechat_pb2 as wpb


def _h(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def dedupe_key(bot_id: str, m: wpb.WechatMessage) -> str:
    """message_id, else client_id, else seq, else the content hash (as T)."""
    if m.message_id:
        which, value = "m", m.message_id
    elif m.client_id:
        which, value = "c", m.client_id
    elif m.seq:
        which, value = "s", str(m.seq)
    else:
        which, value = "h", m.content_hash
    return "wx-" + _h(bot_id, which, value)[:32]


def _slug(value: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:36]


def session_of(bot_id: str, user_id: str) -> str:
    """One session per (binding, user); readable, and unique by its hash."""
    return f"wechat.{_slug(bot_id)}.{_slug(user_id)}.{_h(bot_id, user_id)[:10]}"


def peer_of(bot_id: str, user_id: str) -> str:
    """The trust table's id of a WeChat user of one binding."""
    return f"wechat:{bot_id}/{user_id}"


def client_id(key: str, part: int) -> str:
    """The same for every attempt at one reply part: a resend is the same message."""
    return f"naga-{_h(key)[:20]}-{part}"


def describe(m: wpb.WechatMessage) -> str:
    """The message as text for the model (media are not fetched yet)."""
    lines: list[str] = []
    for item in m.items:
        if item.type == 1:
            lines.append(item.text)
        elif item.type == 3:
            if item.voice_text:
                lines.append(f"[voice message, the server's transcript] {item.voice_text}")
            else:
                lines.append("[a voice message without a transcript: it cannot be heard here]")
        elif item.type == 2:
            lines.append("[an image: this Naga does not download WeChat images yet]")
        elif item.type == 4:
            size = f", {item.declared_size} bytes" if item.declared_size else ""
            lines.append(f"[a file: {item.file_name or 'unnamed'}{size}; not downloaded]")
        elif item.type == 5:
            lines.append("[a video: not downloaded]")
        else:
            lines.append(f"[an item of type {item.type}]")
    return "\n".join(line for line in lines if line) or "[an empty message]"


__all__ = ["client_id", "dedupe_key", "describe", "peer_of", "session_of"]
