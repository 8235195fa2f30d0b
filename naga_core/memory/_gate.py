"""Whose memory a turn is, and who may write it.

A turn's subject is its peer (``wechat:<bot>/<user>``, ``webchat:<name>``,
a remote peer's id); every peer the trust table rates owner is the owner,
one subject (``webchat:owner``), whichever channel it speaks on. A write
needs the trust table's row to allow an R1 tool (``memory.write``'s risk);
a peer below the owner writes only its own memory; the owner may write any
subject's (it is the owner's agent).
"""

from __future__ import annotations

import re

from naga.policy import POLICY
from naga.tokens import Risk
from naga.trust import TrustLevel
from naga_core.memory._errors import RefusalReason, WriteRefused

OWNER_SUBJECT = "webchat:owner"
WRITE_RISK = Risk.R1
SEARCH_RISK = Risk.R0
#: What a subject's name may be: a channel, a colon, an id of that channel.
SUBJECT = re.compile(r"[a-z][a-z0-9_-]{0,31}:[^\s\x00-\x1f]{1,200}")


def subject_of(peer: str, trust: TrustLevel, session: str) -> str:
    """The subject a turn of ``peer`` at ``trust`` in ``session`` is about."""
    if trust is TrustLevel.OWNER:
        return OWNER_SUBJECT
    return peer or f"session:{session}"


def may_use(trust: TrustLevel, risk: Risk) -> bool:
    return POLICY[trust].tool_visible(int(risk))


def check_write(trust: TrustLevel, own: str, subject: str) -> None:
    """Refuse (WriteRefused, TRUST) a write by a peer of ``trust`` whose own
    subject is ``own`` to ``subject``'s memory."""
    if not may_use(trust, WRITE_RISK):
        raise WriteRefused(
            RefusalReason.TRUST,
            f"memory.write is {WRITE_RISK.name}; a {trust.label} peer may not write memory "
            f"(not even {subject}'s)",
        )
    if subject != own and trust is not TrustLevel.OWNER:
        raise WriteRefused(
            RefusalReason.TRUST,
            f"a {trust.label} peer writes only its own memory ({own}), not {subject}'s",
        )


def check_subject(subject: str) -> str | None:
    """Why ``subject`` is not a subject's name, or None."""
    if not SUBJECT.fullmatch(subject):
        return f"subject {subject[:80]!r} is not a subject (like webchat:owner or wechat:bot/user)"
    return None


__all__ = [
    "OWNER_SUBJECT",
    "SEARCH_RISK",
    "SUBJECT",
    "WRITE_RISK",
    "check_subject",
    "check_write",
    "may_use",
    "subject_of",
]
