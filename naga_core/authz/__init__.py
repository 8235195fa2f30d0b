"""Capability tokens and the authorization algebra (SPEC sections 1 and 3,
INV-3 and INV-6; docs/design/authz.md; ADR 0003).

The core mints a token for every other process and sub-task
(:class:`TokenAuthority`); holders narrow it offline
(:meth:`Token.attenuate`) and present it on every call; the core checks it
against the call (:meth:`TokenAuthority.verify`, a :class:`Grant` or
:class:`TokenRejected` with a :class:`RejectReason`). Sub-tasks get strictly
narrower tokens (:meth:`TokenAuthority.spawn`). Revocations, spending and
violations are kernel state (:class:`RevocationList`, :class:`BudgetAccount`,
:class:`ViolationPolicy`), so they are in the ledger; so is every token
minted (a ``token.minted`` record, :func:`stage_minted`: never its secret).

The token format, its caveats and offline attenuation are the contract's
(:mod:`naga.tokens`, so that holders outside the core can narrow tokens);
they are re-exported here. What needs the root key or the kernel is here.

Pure library: no gRPC here; the server maps :class:`RejectReason` to status
codes in one place.
"""

from naga.tokens import (
    Ancestor,
    BudgetCeiling,
    Caveat,
    ExpiresAt,
    Risk,
    RiskCeiling,
    RoleIs,
    SessionIs,
    Token,
    ToolsAllowed,
    TrustCeiling,
)
from naga_core.authz._authority import Checked, Clock, TokenAuthority
from naga_core.authz._caveats import Request, Scope
from naga_core.authz._errors import (
    AuthzError,
    InvalidCaveat,
    InvalidRequest,
    RejectReason,
    TokenKeyError,
    TokenRejected,
    TrustLowered,
)
from naga_core.authz._grant import Grant
from naga_core.authz._keyfile import load_token_key, token_key_path
from naga_core.authz._ledgered import REVOKED_FAMILY, SPENT_FAMILY, BudgetAccount, RevocationList
from naga_core.authz._minted import (
    MINTED_KIND,
    describe_minted,
    minted_record,
    stage_minted,
)
from naga_core.authz._ratchet import (
    AUTHZ_KEEPS,
    AUTHZ_RATCHETS,
    VIOLATIONS_FAMILY,
    EndedTokens,
    ViolationPolicy,
    authz_raises,
    keeps_revocations,
)
from naga_core.authz._token import RootKey, mint_token, verify_chain

__all__ = [
    "AUTHZ_KEEPS",
    "AUTHZ_RATCHETS",
    "MINTED_KIND",
    "REVOKED_FAMILY",
    "SPENT_FAMILY",
    "VIOLATIONS_FAMILY",
    "Ancestor",
    "AuthzError",
    "BudgetAccount",
    "BudgetCeiling",
    "Caveat",
    "Checked",
    "Clock",
    "EndedTokens",
    "ExpiresAt",
    "Grant",
    "InvalidCaveat",
    "InvalidRequest",
    "RejectReason",
    "Request",
    "RevocationList",
    "Risk",
    "RiskCeiling",
    "RoleIs",
    "RootKey",
    "Scope",
    "SessionIs",
    "Token",
    "TokenAuthority",
    "TokenKeyError",
    "TokenRejected",
    "ToolsAllowed",
    "TrustCeiling",
    "TrustLowered",
    "ViolationPolicy",
    "authz_raises",
    "keeps_revocations",
    "describe_minted",
    "load_token_key",
    "mint_token",
    "minted_record",
    "stage_minted",
    "token_key_path",
    "verify_chain",
]
