"""The core's side of the token format: the root key, minting and checking
the HMAC chain.

The format itself (the token, its caveats, parsing and offline attenuation)
is the contract's, :mod:`naga.tokens`, so that holders outside the core can
narrow their tokens. What needs the root key is here:
``tag_0 = HMAC-SHA256(root_key, TOKEN_TAG_DOMAIN || header)``, started by
:func:`mint_token` and recomputed by :func:`verify_chain`.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from naga import tokens
from naga.constants import (
    TOKEN_ID_BYTES,
    TOKEN_KEY_BYTES,
    TOKEN_MAX_SPAWN_DEPTH,
    TOKEN_TAG_DOMAIN,
    TOKEN_VERSION,
)
from naga.tokens import (
    TAG_BYTES,
    Ancestor,
    Caveat,
    Token,
    advance_tag,
    check_peer,
    header_message,
    parse_message,
    token_from_message,
)
from naga_core.authz._errors import AuthzError, RejectReason, TokenKeyError, TokenRejected


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


def new_token_id() -> bytes:
    return secrets.token_bytes(TOKEN_ID_BYTES)


def _first_tag(key: RootKey, header: bytes) -> bytes:
    return hmac.digest(key.secret, TOKEN_TAG_DOMAIN + header, "sha256")


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
    header = header_message(TOKEN_VERSION, token_id, principal, tuple(lineage))
    tag = _first_tag(key, header.SerializeToString(deterministic=True))
    root = Token(TOKEN_VERSION, token_id, principal, tuple(lineage), (), tag)
    try:
        return root.attenuate(*caveats)
    except tokens.TokenRejected as exc:
        raise TokenRejected.of(exc) from None


def verify_chain(key: RootKey, raw: bytes) -> Token:
    """The token ``raw`` holds if its HMAC chain verifies under ``key``.

    Refusals in order: OVERSIZE, MALFORMED, UNSUPPORTED_VERSION, BAD_TAG
    (altered or minted under another key), then MALFORMED or INVALID_CAVEAT
    for a chain that verifies around a bad value. The comparison is
    constant-time, so timing does not tell a forger how much of a tag is right.
    """
    try:
        msg = parse_message(raw)
    except tokens.TokenRejected as exc:
        raise TokenRejected.of(exc) from None
    header = header_message(msg.version, msg.id, msg.principal or None, ())
    header.lineage.extend(msg.lineage)
    tag = _first_tag(key, header.SerializeToString(deterministic=True))
    tag = advance_tag(tag, (c.SerializeToString(deterministic=True) for c in msg.caveats))
    if not hmac.compare_digest(tag, msg.tag):
        raise TokenRejected(
            RejectReason.BAD_TAG,
            "the HMAC chain does not verify (altered, or minted under another root key)",
        )
    try:
        return token_from_message(msg)
    except tokens.TokenRejected as exc:  # authenticated now: say whose token it is
        raise TokenRejected.of(exc, principal=msg.principal or None, token_id=msg.id) from None


__all__ = [
    "TAG_BYTES",
    "Ancestor",
    "RootKey",
    "Token",
    "mint_token",
    "new_token_id",
    "verify_chain",
]
