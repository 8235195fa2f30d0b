"""The token format: a macaroon-style HMAC chain over typed caveats.

``tag_0 = HMAC-SHA256(root_key, TOKEN_TAG_DOMAIN || header)`` where the
header is the canonical encoding of the fields only the core writes
(version, id, principal, lineage); ``tag_i = HMAC-SHA256(tag_{i-1},
caveat_i)``. Anyone holding a token can append a caveat and advance the tag
(:meth:`Token.attenuate`); only the root key's holder can check the chain
(:func:`verify_chain`) or start one (:func:`mint_token`). Wire layout and
reasons: proto/naga/v1/authz.proto, docs/design/authz.md.

This module needs no key to read or attenuate a token, and nothing of the
core but its errors and caveats, so a holder-side copy can be lifted into the
shared ``naga`` package unchanged.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from naga.constants import (
    TOKEN_ID_BYTES,
    TOKEN_KEY_BYTES,
    TOKEN_MAX_BYTES,
    TOKEN_MAX_CAVEATS,
    TOKEN_MAX_SPAWN_DEPTH,
    TOKEN_TAG_DOMAIN,
    TOKEN_VERSION,
)
from naga.v1 import authz_pb2 as pb
from naga_core.authz._caveats import (
    Caveat,
    caveat_bytes,
    check_budget,
    check_peer,
    decode_caveat,
    encode_caveat,
)
from naga_core.authz._errors import (
    AuthzError,
    InvalidCaveat,
    RejectReason,
    TokenKeyError,
    TokenRejected,
)

TAG_BYTES = 32


@dataclass(frozen=True, slots=True)
class RootKey:
    """The core's token root key. Its repr never shows the secret."""

    secret: bytes = field(repr=False)

    @classmethod
    def generate(cls) -> RootKey:
        return cls(secrets.token_bytes(TOKEN_KEY_BYTES))

    def __post_init__(self) -> None:
        if not isinstance(self.secret, bytes) or len(self.secret) != TOKEN_KEY_BYTES:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TokenKeyError(f"a token root key is {TOKEN_KEY_BYTES} bytes")


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
    """A capability token. Read one with :meth:`from_bytes`; the core makes
    them with :func:`mint_token`; holders narrow them with :meth:`attenuate`."""

    version: int
    id: bytes
    principal: str | None
    lineage: tuple[Ancestor, ...]
    caveats: tuple[Caveat, ...]
    tag: bytes

    @classmethod
    def from_bytes(cls, raw: bytes) -> Token:
        """Parse and check the structure; the tag is NOT verified (that needs
        the root key: :func:`verify_chain`). TokenRejected if not a token."""
        return _decode(_parse(raw))

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
            _advance(self.tag, (caveat_bytes(c) for c in caveats)),
        )
        size = len(narrowed.to_bytes())
        if size > TOKEN_MAX_BYTES:
            raise TokenRejected(
                RejectReason.OVERSIZE, f"{size} bytes attenuated (at most {TOKEN_MAX_BYTES})"
            )
        return narrowed

    def _message(self) -> pb.CapabilityToken:
        msg = _header(self.version, self.id, self.principal, self.lineage)
        msg.caveats.extend(encode_caveat(c) for c in self.caveats)
        msg.tag = self.tag
        return msg


def new_token_id() -> bytes:
    return secrets.token_bytes(TOKEN_ID_BYTES)


def mint_token(
    key: RootKey,
    *,
    token_id: bytes,
    principal: str | None,
    lineage: Sequence[Ancestor],
    caveats: Sequence[Caveat],
) -> Token:
    """A new token under ``key`` (the core only)."""
    if len(token_id) != TOKEN_ID_BYTES:
        raise AuthzError(f"a token id is {TOKEN_ID_BYTES} bytes, not {len(token_id)}")
    if principal is not None:
        check_peer(principal)
    if len(lineage) > TOKEN_MAX_SPAWN_DEPTH:
        raise TokenRejected(
            RejectReason.SPAWN_TOO_DEEP,
            f"a lineage of {len(lineage)} (at most {TOKEN_MAX_SPAWN_DEPTH})",
        )
    header = _header(TOKEN_VERSION, token_id, principal, tuple(lineage))
    tag = hmac.digest(
        key.secret, TOKEN_TAG_DOMAIN + header.SerializeToString(deterministic=True), "sha256"
    )
    root = Token(TOKEN_VERSION, token_id, principal, tuple(lineage), (), tag)
    return root.attenuate(*caveats)


def verify_chain(key: RootKey, raw: bytes) -> Token:
    """The token ``raw`` holds if its HMAC chain verifies under ``key``.

    Refusals in order: OVERSIZE, MALFORMED, UNSUPPORTED_VERSION, BAD_TAG
    (altered or minted under another key), then MALFORMED or INVALID_CAVEAT
    for a chain that verifies around a bad value. The comparison is
    constant-time, so timing does not tell a forger how much of a tag is right.
    """
    msg = _parse(raw)
    header = _header(msg.version, msg.id, msg.principal or None, ())
    header.lineage.extend(msg.lineage)
    tag = hmac.digest(
        key.secret, TOKEN_TAG_DOMAIN + header.SerializeToString(deterministic=True), "sha256"
    )
    tag = _advance(tag, (c.SerializeToString(deterministic=True) for c in msg.caveats))
    if not hmac.compare_digest(tag, msg.tag):
        raise TokenRejected(
            RejectReason.BAD_TAG,
            "the HMAC chain does not verify (altered, or minted under another root key)",
        )
    try:
        return _decode(msg)
    except TokenRejected as exc:  # authenticated now: say whose token it is
        raise TokenRejected(
            exc.reason, exc.detail, principal=msg.principal or None, token_id=msg.id
        ) from None


# --- internals -----------------------------------------------------------------------------


def _advance(tag: bytes, links: Iterable[bytes]) -> bytes:
    for link in links:
        tag = hmac.digest(tag, link, "sha256")
    return tag


def _header(
    version: int, token_id: bytes, principal: str | None, lineage: tuple[Ancestor, ...]
) -> pb.CapabilityToken:
    msg = pb.CapabilityToken(version=version, id=token_id, principal=principal or "")
    for anc in lineage:
        entry = msg.lineage.add(id=anc.id)
        if anc.budget_ceiling is not None:
            entry.budget_ceiling = anc.budget_ceiling
    return msg


def _parse(raw: bytes) -> pb.CapabilityToken:
    """The message ``raw`` encodes, structurally checked; no key involved."""
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
    # the same token to slip past a cache or a log), and a field this core
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
            f"format version {msg.version} (this core reads {TOKEN_VERSION})",
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


def _decode(msg: pb.CapabilityToken) -> Token:
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
    "RootKey",
    "Token",
    "mint_token",
    "new_token_id",
    "verify_chain",
]
