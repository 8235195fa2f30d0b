"""The token format: a macaroon-style HMAC chain over typed caveats.

``tag_0 = HMAC-SHA256(root_key, TOKEN_TAG_DOMAIN || header)`` where the
header is the canonical encoding of the fields only the core writes
(version, id, principal, lineage); ``tag_i = HMAC-SHA256(tag_{i-1},
caveat_i)``. Anyone holding a token can append a caveat and advance the tag
(:meth:`Token.attenuate`), offline and without the root key; only the root
key's holder, the core, can check the chain or start one
(``naga_core.authz``). Wire layout and reasons: proto/naga/v1/authz.proto,
docs/design/authz.md.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from naga.constants import (
    TOKEN_ID_BYTES,
    TOKEN_MAX_BYTES,
    TOKEN_MAX_CAVEATS,
    TOKEN_MAX_SPAWN_DEPTH,
    TOKEN_VERSION,
)
from naga.tokens._caveats import (
    Caveat,
    caveat_bytes,
    check_budget,
    check_peer,
    decode_caveat,
    encode_caveat,
)
from naga.tokens._errors import InvalidCaveat, RejectReason, TokenRejected
from naga.v1 import authz_pb2 as pb

TAG_BYTES = 32


@dataclass(frozen=True, slots=True)
class Ancestor:
    """An ancestor of a sub-task's token: its id and its budget ceiling at
    the spawn (None: unlimited)."""

    id: bytes
    budget_ceiling: int | None

    def __post_init__(self) -> None:
        if len(self.id) != TOKEN_ID_BYTES:
            raise InvalidCaveat(f"an ancestor id is {TOKEN_ID_BYTES} bytes, not {len(self.id)}")
        if self.budget_ceiling is not None:
            check_budget(self.budget_ceiling, "ancestor budget ceiling")


@dataclass(frozen=True, slots=True)
class Token:
    """A capability token. Read one with :meth:`from_bytes`; the core mints
    them; holders narrow them with :meth:`attenuate`."""

    version: int
    id: bytes
    principal: str | None
    lineage: tuple[Ancestor, ...]
    caveats: tuple[Caveat, ...]
    tag: bytes

    @classmethod
    def from_bytes(cls, raw: bytes) -> Token:
        """Parse and check the structure; the tag is NOT verified (that needs
        the root key, which only the core has). TokenRejected if not a token."""
        return token_from_message(parse_message(raw))

    def to_bytes(self) -> bytes:
        return self._message().SerializeToString(deterministic=True)

    @property
    def depth(self) -> int:
        """0 for a root token, 1 for its sub-task's, ..."""
        return len(self.lineage)

    def attenuate(self, *caveats: Caveat) -> Token:
        """This token narrowed by ``caveats`` (appended in order), without the
        root key. Refused (OVERSIZE) past the bounds the core enforces."""
        if len(self.caveats) + len(caveats) > TOKEN_MAX_CAVEATS:
            raise TokenRejected(
                RejectReason.OVERSIZE,
                f"{len(self.caveats) + len(caveats)} caveats (at most {TOKEN_MAX_CAVEATS})",
            )
        narrowed = Token(
            self.version,
            self.id,
            self.principal,
            self.lineage,
            (*self.caveats, *caveats),
            advance_tag(self.tag, (caveat_bytes(c) for c in caveats)),
        )
        size = len(narrowed.to_bytes())
        if size > TOKEN_MAX_BYTES:
            raise TokenRejected(
                RejectReason.OVERSIZE, f"{size} bytes attenuated (at most {TOKEN_MAX_BYTES})"
            )
        return narrowed

    def _message(self) -> pb.CapabilityToken:
        msg = header_message(self.version, self.id, self.principal, self.lineage)
        msg.caveats.extend(encode_caveat(c) for c in self.caveats)
        msg.tag = self.tag
        return msg


# --- the pieces the core's verifier shares ----------------------------------------------


def advance_tag(tag: bytes, links: Iterable[bytes]) -> bytes:
    """The chain ``tag`` becomes after the caveat encodings ``links``."""
    for link in links:
        tag = hmac.digest(tag, link, "sha256")
    return tag


def header_message(
    version: int, token_id: bytes, principal: str | None, lineage: tuple[Ancestor, ...]
) -> pb.CapabilityToken:
    """A token message holding only the header (fields 1 to 4)."""
    msg = pb.CapabilityToken(version=version, id=token_id, principal=principal or "")
    for anc in lineage:
        entry = msg.lineage.add(id=anc.id)
        if anc.budget_ceiling is not None:
            entry.budget_ceiling = anc.budget_ceiling
    return msg


def parse_message(raw: bytes) -> pb.CapabilityToken:
    """The message ``raw`` encodes, structurally checked; no key involved.
    Refusals in order: OVERSIZE, MALFORMED, UNSUPPORTED_VERSION."""
    if not isinstance(raw, bytes | bytearray | memoryview):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TokenRejected(RejectReason.MALFORMED, f"a token is bytes, not {type(raw).__name__}")
    raw = bytes(raw)
    if len(raw) > TOKEN_MAX_BYTES:
        raise TokenRejected(RejectReason.OVERSIZE, f"{len(raw)} bytes (at most {TOKEN_MAX_BYTES})")
    msg = pb.CapabilityToken()
    try:
        msg.ParseFromString(raw)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError is a bare Exception subclass
        raise TokenRejected(RejectReason.MALFORMED, f"not a token: {exc}") from None
    # One encoding per token: its bytes identify it (no second spelling of
    # the same token to slip past a cache or a log), and a field this side
    # does not know (a newer caveat kind) is refused, never silently dropped.
    msg.DiscardUnknownFields()
    if msg.SerializeToString(deterministic=True) != raw:
        raise TokenRejected(
            RejectReason.MALFORMED,
            "not in canonical form (unknown fields, or not the deterministic encoding)",
        )
    if msg.version == 0 or not msg.id or not msg.tag:
        # Whatever the version, a token has an id and a tag: without them
        # this is garbage, not a token from another version.
        raise TokenRejected(RejectReason.MALFORMED, "not a token: no version, id or tag")
    if msg.version != TOKEN_VERSION:
        raise TokenRejected(
            RejectReason.UNSUPPORTED_VERSION,
            f"format version {msg.version} (this side reads {TOKEN_VERSION})",
        )
    if len(msg.id) != TOKEN_ID_BYTES:
        raise TokenRejected(
            RejectReason.MALFORMED, f"an id of {len(msg.id)} bytes (not {TOKEN_ID_BYTES})"
        )
    if len(msg.tag) != TAG_BYTES:
        raise TokenRejected(
            RejectReason.MALFORMED, f"a tag of {len(msg.tag)} bytes (not {TAG_BYTES})"
        )
    if len(msg.caveats) > TOKEN_MAX_CAVEATS:
        raise TokenRejected(
            RejectReason.OVERSIZE, f"{len(msg.caveats)} caveats (at most {TOKEN_MAX_CAVEATS})"
        )
    if len(msg.lineage) > TOKEN_MAX_SPAWN_DEPTH:
        raise TokenRejected(
            RejectReason.OVERSIZE,
            f"a lineage of {len(msg.lineage)} (at most {TOKEN_MAX_SPAWN_DEPTH})",
        )
    return msg


def token_from_message(msg: pb.CapabilityToken) -> Token:
    """The token a structurally checked message holds: MALFORMED for a bad
    principal or ancestor, INVALID_CAVEAT for a caveat of no kind or a value
    out of range (fail closed)."""
    try:
        principal = check_peer(msg.principal) if msg.principal else None
        lineage = tuple(
            Ancestor(a.id, a.budget_ceiling if a.HasField("budget_ceiling") else None)
            for a in msg.lineage
        )
    except InvalidCaveat as exc:
        raise TokenRejected(RejectReason.MALFORMED, str(exc)) from None
    caveats: list[Caveat] = []
    for i, c in enumerate(msg.caveats):
        try:
            caveats.append(decode_caveat(c))
        except InvalidCaveat as exc:
            raise TokenRejected(RejectReason.INVALID_CAVEAT, f"caveat {i}: {exc}") from None
    return Token(msg.version, msg.id, principal, lineage, tuple(caveats), msg.tag)


__all__ = [
    "TAG_BYTES",
    "Ancestor",
    "Token",
    "advance_tag",
    "header_message",
    "parse_message",
    "token_from_message",
]
