"""The core's authorizer: the owner credential or a capability token on
every call, checked against the method's rule (naga_core.daemon._policy).

Where each check runs (docs/design/architecture.md, "Checking a call"):

* server thread, before decoding: the credential's scheme and base64; the
  owner credential's comparison; a token's size, parse and HMAC chain
  (``TokenAuthority.authenticate``). Pure: the key and nothing else.
* server thread, after decoding: the token's caveats against the call
  (expiry, the method's roles, the session and tool the request names, the
  method's risk; ``TokenAuthority.check``). Pure: the clock and the request.
* the core's trio loop, before the handler: revocation, budget left and the
  principal's current trust (``TokenAuthority.settle``), which read kernel
  state; and recording a violation (``ViolationPolicy``), which writes it.
  Refusals keep the authority's order: revocation before what the pure
  checks found.
* for a server-streaming call, the same loop, before every batch it sends:
  the token's standing (``TokenStanding``: not revoked since, not expired,
  its principal's trust not lowered below the grant's), so a revocation, an
  expiry or a lowered trust ends a stream that is already open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import Message

from naga.tokens import RejectReason, RoleIs, SessionIs, Token
from naga_core.authz import (
    Checked,
    Grant,
    InvalidRequest,
    RevocationList,
    TokenAuthority,
    TokenRejected,
    ViolationPolicy,
)
from naga_core.daemon._auth import (
    OWNER_SCHEME,
    Caller,
    Metadata,
    OwnerCall,
    OwnerCredential,
    Principal,
    Standing,
    Unconditional,
    presented_credential,
)
from naga_core.daemon._errors import CredentialRefused, RequestRefused
from naga_core.daemon._policy import POLICY, Rule
from naga_core.daemon._standing import RevocationWatch, TokenStanding, TrustWatch

T = TypeVar("T")
#: Runs a kernel write on the loop (``Core.write``: subscribers see it).
Write = Callable[[Callable[[], T]], T]

# A token naming no role (the core never mints one) is checked as this role,
# which no rule admits.
_NO_ROLE = "none"


class CoreAuthorizer:
    """Owner credential or capability token, against the policy table."""

    def __init__(
        self,
        *,
        owner: OwnerCredential,
        authority: TokenAuthority,
        violations: ViolationPolicy,
        write: Write[object],
        trust: TrustWatch,
        policy: Mapping[str, Rule] = POLICY,
    ) -> None:
        self._owner = owner
        self.authority = authority
        self._violations = violations
        self._write = write
        self._policy = policy
        #: Wakes open streams when the revocation list may have changed;
        #: the composition root also bumps it after every rollback.
        self.revocations = RevocationWatch()
        #: The trust table's epoch (the core's: its writes wake the streams).
        self.trust = trust

    def standing_of(self, grant: Grant) -> TokenStanding:
        """The standing of ``grant`` (settled by the caller), woken by this
        core's revocations and trust changes: a running turn holds its
        token's."""
        return TokenStanding.of(self.authority, grant, self.revocations, self.trust)

    def rule(self, method: str) -> Rule:
        rule = self._policy.get(method)
        if rule is None:  # fail closed: a method nobody wrote a rule for
            raise CredentialRefused(f"{method} has no access rule; the core refuses it")
        return rule

    def authorize(self, metadata: Metadata, method: str) -> Caller:
        rule = self.rule(method)
        scheme, presented = presented_credential(metadata)
        name = method.rsplit("/", 1)[-1]
        if scheme == OWNER_SCHEME:
            call = self._owner.verify(presented, method)
            if not rule.owner:
                raise RequestRefused.denied(
                    f"{name} is for capability token holders ({rule.callers()}), not the "
                    "owner credential"
                )
            return call
        token = self.authority.authenticate(presented)
        return TokenCaller(self, name, rule, token)

    def revoke(self, revocations: RevocationList, token_id: bytes, reason: str) -> int | None:
        """Revoke ``token_id`` (staged, like every write) and wake the open
        streams, so one of its own ends now. The seq; None if it already was."""
        seq = self._write(lambda: revocations.revoke(token_id, reason))
        if not isinstance(seq, int):
            return None
        self.revocations.bump()
        return seq

    def observe(self, rejected: TokenRejected) -> None:
        """Count ``rejected`` against its principal if it is a violation
        (INV-6: enough of them lower the principal's trust). On the loop."""
        if rejected.principal is not None and rejected.reason.is_violation:
            self._write(lambda: self._violations.observe(rejected))


@dataclass(frozen=True, slots=True)
class TokenCaller:
    """A call presenting a token whose chain verified."""

    authorizer: CoreAuthorizer
    method: str
    rule: Rule
    token: Token

    def check(self, request: Message) -> TokenAdmission:
        rule, authority = self.rule, self.authorizer.authority
        role = own_role(self.token)
        role_refusal: tuple[RejectReason, str] | None = None
        if role not in rule.roles:
            role_refusal = (
                RejectReason.WRONG_ROLE,
                f"{self.method} is not open to a {role!r} token (it is for {rule.callers()})",
            )
        session = _text(request, rule.session)
        if session is None:
            # A call that acts in no session (GetHead, Status, Inspect) is
            # not "another session": it is checked as the token's own.
            session = own_session(self.token)
        try:
            checked_request = authority.request(
                role,
                session=session,
                tool=_text(request, rule.tool),
                risk=rule.risk,
                budget=_amount(request, rule.amount),
            )
        except InvalidRequest as exc:
            raise RequestRefused.invalid(str(exc)) from None
        checked = authority.check(self.token, checked_request, role_refusal=role_refusal)
        return TokenAdmission(self.authorizer, checked)


@dataclass(frozen=True, slots=True)
class TokenAdmission:
    authorizer: CoreAuthorizer
    checked: Checked

    def admit(self) -> Principal:
        try:
            grant = self.authorizer.authority.settle(self.checked)
        except TokenRejected as exc:
            self.authorizer.observe(exc)
            raise
        return Principal.holder(grant)

    def standing(self, principal: Principal) -> Standing:
        if principal.grant is None:  # admit() gives a holder; belt and braces
            return Unconditional()
        authorizer = self.authorizer
        return TokenStanding.of(
            authorizer.authority, principal.grant, authorizer.revocations, authorizer.trust
        )


def own_role(token: Token) -> str:
    """The role ``token`` names. With several (a holder may add caveats), the
    first in order: the others then refuse every call anyway."""
    roles = sorted(c.role for c in token.caveats if isinstance(c, RoleIs))
    return roles[0] if roles else _NO_ROLE


def own_session(token: Token) -> str | None:
    """The session ``token`` is bound to (None: any); with several, as for roles."""
    sessions = sorted(c.session for c in token.caveats if isinstance(c, SessionIs))
    return sessions[0] if sessions else None


def _text(request: Message, field: str | None) -> str | None:
    """The field's value; None when unset (an ``optional`` field not set, or
    a plain proto3 string left empty: a session is never the empty string)."""
    if field is None:
        return None
    if request.DESCRIPTOR.fields_by_name[field].has_presence and not request.HasField(field):
        return None
    value: str = getattr(request, field)
    return value or None


def _amount(request: Message, field: str | None) -> int:
    if field is None:
        return 0
    value: int = getattr(request, field)
    return value


__all__ = [
    "CoreAuthorizer",
    "OwnerCall",
    "TokenAdmission",
    "TokenCaller",
    "own_role",
    "own_session",
]
