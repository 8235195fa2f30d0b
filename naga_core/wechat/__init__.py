"""The WeChat channel in the core (docs/design/wechat.md): bindings, their
long polls, inbound messages into turns, replies out, through the
sandboxed WeChat plugin (naga_plugins.wechat)."""

from naga_core.wechat._base import BINDING, CURSOR, PENDING, ChannelConfig
from naga_core.wechat._channel import (
    WechatChannel,
    WechatNotBound,
    WechatPeerUnknown,
    WechatSendRefused,
)
from naga_core.wechat._chunks import LIMIT, can_break, chunks
from naga_core.wechat._keys import client_id, dedupe_key, describe, peer_of, session_of
from naga_core.wechat._media import (
    MAX_MEDIA_BYTES,
    MediaFileRefused,
    read_media_file,
    remove_outbox_file,
    write_outbox_file,
)
from naga_core.wechat._plugin import PluginCallFailed
from naga_core.wechat._store import Credentials, CredentialsInvalid, WechatError
from naga_core.wechat._tool import WechatSendFileTool, wechat_target

__all__ = [
    "MAX_MEDIA_BYTES",
    "MediaFileRefused",
    "read_media_file",
    "remove_outbox_file",
    "write_outbox_file",
    "BINDING",
    "CURSOR",
    "LIMIT",
    "PENDING",
    "ChannelConfig",
    "Credentials",
    "CredentialsInvalid",
    "PluginCallFailed",
    "WechatChannel",
    "WechatError",
    "WechatNotBound",
    "WechatPeerUnknown",
    "WechatSendFileTool",
    "WechatSendRefused",
    "can_break",
    "chunks",
    "client_id",
    "dedupe_key",
    "describe",
    "peer_of",
    "session_of",
    "wechat_target",
]
