"""Capability tokens, the holder's side: read, narrow and present a token
without the core's key (SPEC section 1; docs/design/authz.md; ADR 0003).

Every non-core process (gateway, executors, plugins) holds a token the core
minted. It can narrow it OFFLINE before handing it to something it starts::

    from naga.tokens import RiskCeiling, Risk, SessionIs, Token, ToolsAllowed

    mine = Token.from_bytes(raw)
    theirs = mine.attenuate(SessionIs("s-1"), ToolsAllowed.of(["fs.read"]),
                            RiskCeiling(Risk.R0))
    Client.connect(home, credential=theirs)   # naga.sdk

An attenuated token can only be refused more and granted less; nobody
without the root key can drop, reorder or alter a caveat. Checking a token
(the HMAC chain, revocation, budgets) is the core's alone
(``naga_core.authz``, which builds on this package). Pure code: no I/O.
"""

from naga.tokens._caveats import (
    MAX_INT64,
    BudgetCeiling,
    Caveat,
    ExpiresAt,
    Risk,
    RiskCeiling,
    RoleIs,
    SessionIs,
    ToolsAllowed,
    TrustCeiling,
    TrustLevel,
    as_trust_level,
    caveat_bytes,
    check_budget,
    check_peer,
    check_role,
    check_session,
    check_tool,
    decode_caveat,
    encode_caveat,
)
from naga.tokens._errors import InvalidCaveat, RejectReason, TokenError, TokenRejected
from naga.tokens._token import (
    TAG_BYTES,
    Ancestor,
    Token,
    advance_tag,
    header_message,
    parse_message,
    token_from_message,
)

#: How a token is presented on a call: the metadata entry
#: ``authorization: Capability <base64 of the token's bytes>``.
CAPABILITY_SCHEME = "Capability"
#: The trailing metadata entry in which the core names why it refused a
#: token (a ``RejectReason`` name, e.g. ``REVOKED``).
REJECT_REASON_KEY = "naga-reject-reason"

__all__ = [
    "CAPABILITY_SCHEME",
    "MAX_INT64",
    "REJECT_REASON_KEY",
    "TAG_BYTES",
    "Ancestor",
    "BudgetCeiling",
    "Caveat",
    "ExpiresAt",
    "InvalidCaveat",
    "RejectReason",
    "Risk",
    "RiskCeiling",
    "RoleIs",
    "SessionIs",
    "Token",
    "TokenError",
    "TokenRejected",
    "ToolsAllowed",
    "TrustCeiling",
    "TrustLevel",
    "advance_tag",
    "as_trust_level",
    "caveat_bytes",
    "check_budget",
    "check_peer",
    "check_role",
    "check_session",
    "check_tool",
    "decode_caveat",
    "encode_caveat",
    "header_message",
    "parse_message",
    "token_from_message",
]
