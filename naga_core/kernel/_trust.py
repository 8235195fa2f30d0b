"""The trust table: peer -> owner / known / guest / untrusted, as the kernel's
``trust`` family (SPEC section 4, "L0.5 access plane"; INV-6).

Each entry is a registration ``trust/<peer> = "<level>"`` (the level's
lowercase name, so the ledger reads as words). A peer with no entry, or with
an entry that is not a level name (only a raw registration can write one),
is UNTRUSTED: the table fails closed.

INV-6, the mode ratchet: trust lowers automatically, never rises
automatically. :meth:`TrustTable.lower` (the automatic path: a guard that saw
a peer misbehave) may only lower and needs a reason; :meth:`TrustTable.set`
raises a level only with ``by_owner=True`` (else :class:`TrustRaiseRefused`)
and lowers freely. ``by_owner`` is an assertion by the caller, the core's
request layer, that the request was authenticated as the owner's; this
module enforces the rule, not the authentication. :func:`trust_raises` finds
the raises in a list of changes, for paths that change trust wholesale (a
branch merge, a rollback preview).

Peer ids are ``<channel>:<id>`` (``webchat:loopback``, ``wechat:wxid_abc``):
a lowercase channel name, a colon, then at least one printable,
non-whitespace character; at most 200 characters in all. Qualifying by
channel keeps the same id on two channels two different peers; refusing
whitespace keeps ``"wechat:bob "`` from passing for ``"wechat:bob"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from naga.trust import TrustLevel
from naga_core.kernel._kernel import Change
from naga_core.kernel._state import KernelError, Registrar, Scalar

TRUST_FAMILY = "trust"
MAX_PEER_CHARS = 200
_PEER = re.compile(r"[a-z][a-z0-9_-]{0,31}:\S+")


class TrustError(KernelError):
    """A trust-table operation was refused."""


class InvalidPeer(TrustError):
    """A peer id is not ``<channel>:<id>`` or is too long."""


class TrustRaiseRefused(TrustError):
    """Raising trust without the owner (INV-6)."""


@dataclass(frozen=True, slots=True)
class TrustEntry:
    peer: str
    level: TrustLevel


def check_peer(peer: str) -> str:
    """``peer`` if it is a valid peer id; :class:`InvalidPeer` naming the rule otherwise."""
    if not isinstance(peer, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidPeer(f"peer id {peer!r} is not a string")
    if len(peer) > MAX_PEER_CHARS:
        raise InvalidPeer(
            f"peer id {peer[:40]!r}... has {len(peer)} characters (at most {MAX_PEER_CHARS})"
        )
    if not peer.isprintable() or not _PEER.fullmatch(peer):
        raise InvalidPeer(
            f"peer id {peer!r} is not <channel>:<id> (a lowercase channel name, a colon, "
            "then printable characters without whitespace)"
        )
    return peer


def stored_level(value: Scalar | None) -> TrustLevel:
    """The level a stored entry means: absent or unreadable is UNTRUSTED."""
    if isinstance(value, str):
        for level in TrustLevel:
            if level.label == value:
                return level
    return TrustLevel.UNTRUSTED


def trust_raises(changes: Iterable[Change]) -> list[Change]:
    """The changes in ``changes`` that raise some peer's trust."""
    return [
        c
        for c in changes
        if c.family == TRUST_FAMILY and stored_level(c.after) > stored_level(c.before)
    ]


class TrustTable:
    """The trust table over a kernel (or a shadow branch)."""

    def __init__(self, registrar: Registrar) -> None:
        self._reg = registrar

    def _stored(self, peer: str) -> Scalar | None:
        return self._reg.state.get((TRUST_FAMILY, check_peer(peer)))

    def level(self, peer: str) -> TrustLevel:
        """The peer's level; UNTRUSTED for a peer with no entry."""
        return stored_level(self._stored(peer))

    def set(self, peer: str, level: TrustLevel, *, by_owner: bool, reason: str = "") -> int | None:
        """Set the peer's level. Raising needs ``by_owner=True``; lowering does
        not. Returns the seq of the registration, or None when nothing was
        journaled (the entry already says ``level``, or this is a branch).
        Setting UNTRUSTED on a peer with no entry writes an explicit entry."""
        stored = self._stored(peer)
        current = stored_level(stored)
        level = _as_level(level)
        if level > current and not by_owner:
            raise TrustRaiseRefused(
                f"raising trust of {peer!r} from {current.label} to {level.label} needs the owner"
            )
        if stored == level.label:
            return None
        who = "owner set" if by_owner else "set"
        because = f": {reason}" if reason else ""
        return self._reg.register(
            TRUST_FAMILY,
            peer,
            level.label,
            description=f"{who} trust of {peer}: {current.label} -> {level.label}{because}",
        )

    def lower(self, peer: str, level: TrustLevel, reason: str) -> int | None:
        """Lower the peer's level to ``level``, automatically: always allowed,
        never a raise (TrustRaiseRefused). Needs a reason, kept in the ledger.
        Returns the seq, or None when the level is already ``level``."""
        if not reason.strip():
            raise TrustError(f"lowering the trust of {peer!r} needs a reason")
        current = self.level(peer)
        level = _as_level(level)
        if level > current:
            raise TrustRaiseRefused(
                f"lower() cannot raise trust of {peer!r} from {current.label} to {level.label}"
            )
        if level == current:
            return None
        return self._reg.register(
            TRUST_FAMILY,
            peer,
            level.label,
            description=f"lower trust of {peer}: {current.label} -> {level.label}: {reason}",
        )

    def entries(self) -> list[TrustEntry]:
        """Every peer with an entry, by peer id."""
        found = [(k, v) for (f, k), v in self._reg.state.items() if f == TRUST_FAMILY]
        return [TrustEntry(peer, stored_level(value)) for peer, value in sorted(found)]


def _as_level(level: TrustLevel) -> TrustLevel:
    try:
        return TrustLevel(level)
    except ValueError:
        raise TrustError(f"{level!r} is not a trust level") from None


__all__ = [
    "MAX_PEER_CHARS",
    "TRUST_FAMILY",
    "InvalidPeer",
    "TrustEntry",
    "TrustError",
    "TrustLevel",
    "TrustRaiseRefused",
    "TrustTable",
    "check_peer",
    "stored_level",
    "trust_raises",
]
