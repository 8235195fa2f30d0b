"""A WeChat user's words as the core keeps them between receiving and
answering (docs/adr/0037-seal18-sealed-sessions.md): a pending message's
text and the media it carried, sealed under the user's subject key, so
that neither kernel state (``wechat.pending/<key>``, its ledger records
and snapshots) nor the blob store holds them in the clear, and forgetting
the user makes them unreadable."""

from __future__ import annotations

from naga.v1 import wechat_pb2 as wpb
from naga_core.memory import FORGOTTEN, OWNER_SUBJECT, Sealer
from naga_core.wechat._keys import peer_of


def subject_of_user(bot_id: str, user_id: str, *, owner: bool) -> str:
    """The subject a WeChat user's words are about: the owner's one subject
    for the bound owner, else the user's own peer (as memory's)."""
    return OWNER_SUBJECT if owner else peer_of(bot_id, user_id)


def stored(sealer: Sealer, p: wpb.WechatPending) -> bytes:
    """What kernel state keeps of ``p``: its text sealed, cleared."""
    if not p.text:
        return p.SerializeToString()
    out = wpb.WechatPending()
    out.CopyFrom(p)
    out.ClearField("text")
    who = subject_of_user(p.bot_id, p.user_id, owner=p.owner)
    out.sealed_text = sealer.seal_blob(who, p.text.encode())
    return out.SerializeToString()


def loaded(sealer: Sealer, raw: bytes) -> wpb.WechatPending:
    """A pending message read back from kernel state, its text opened (a
    forgotten user's reads as forgotten). DecodeError if it is not one."""
    p = wpb.WechatPending.FromString(raw)
    if p.sealed_text:
        opened = sealer.open_blob(p.sealed_text)
        p.text = opened.decode(errors="replace") if opened is not None else FORGOTTEN
        p.ClearField("sealed_text")
    return p


__all__ = ["loaded", "stored", "subject_of_user"]
