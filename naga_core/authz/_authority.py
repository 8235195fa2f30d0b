"""The token authority: mints root tokens, checks tokens against requests,
and mints sub-task tokens that can only be narrower than their parent.

It holds the root key and reads the world through injected callables: the
clock (ns), whether an id is revoked, how much was spent under an id, a
peer's trust level. :meth:`TokenAuthority.over_kernel` wires the
kernel-backed ones; tests inject a virtual clock and plain dicts.

Spawn rules (INV-3): the child's budget is strictly below what the parent
may still spend, its tools a subset, its risk and trust ceilings at most the
parent's, its expiry no later, its session the parent's (or one, if the
parent had none); role and principal are the parent's. Anything else is
refused (WIDENING) before an id is drawn, so nothing is minted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from naga.constants import TOKEN_MAX_SPAWN_DEPTH
from naga.tokens import (
    MAX_INT64,
    Ancestor,
    BudgetCeiling,
    Caveat,
    ExpiresAt,
    InvalidCaveat,
    Risk,
    RiskCeiling,
    RoleIs,
    SessionIs,
    Token,
    ToolsAllowed,
    TrustCeiling,
    check_budget,
    check_session,
)
from naga_core.authz._caveats import Request, Scope
from naga_core.authz._errors import RejectReason, TokenRejected, TrustLowered
from naga_core.authz._grant import Grant
from naga_core.authz._ledgered import BudgetAccount, RevocationList
from naga_core.authz._token import RootKey, mint_token, new_token_id, verify_chain
from naga_core.kernel import Kernel, TrustLevel, TrustTable

Clock = Callable[[], int]
IsRevoked = Callable[[bytes], bool]
Spent = Callable[[bytes], int]
TrustOf = Callable[[str], TrustLevel]


@dataclass(frozen=True, slots=True)
class Checked:
    """A token whose chain verified, checked against one request by the pure
    rules; ``refusal`` is the first they found (raised by
    :meth:`TokenAuthority.settle`, after the revocation check)."""

    token: Token
    scope: Scope
    request: Request
    refusal: TokenRejected | None


class TokenAuthority:
    """Build with :meth:`create` or :meth:`over_kernel`."""

    __slots__ = ("_clock", "_is_revoked", "_key", "_new_id", "_spent", "_trust_of")

    def __init__(
        self,
        key: RootKey,
        *,
        clock: Clock,
        is_revoked: IsRevoked,
        spent: Spent,
        trust_of: TrustOf,
        new_id: Callable[[], bytes],
    ) -> None:
        self._key = key
        self._clock = clock
        self._is_revoked = is_revoked
        self._spent = spent
        self._trust_of = trust_of
        self._new_id = new_id

    @classmethod
    def create(
        cls,
        key: RootKey,
        *,
        clock: Clock,
        is_revoked: IsRevoked,
        spent: Spent,
        trust_of: TrustOf,
        new_id: Callable[[], bytes] = new_token_id,
    ) -> TokenAuthority:
        """An authority over explicit sources. None of them has a default: an
        authority that forgot revocation or spending would grant too much."""
        return cls(
            key, clock=clock, is_revoked=is_revoked, spent=spent, trust_of=trust_of, new_id=new_id
        )

    @classmethod
    def over_kernel(cls, kernel: Kernel, key: RootKey, *, clock: Clock) -> TokenAuthority:
        """An authority reading revocations, spending and trust from ``kernel``."""
        return cls.create(
            key,
            clock=clock,
            is_revoked=RevocationList(kernel).is_revoked,
            spent=BudgetAccount(kernel).spent,
            trust_of=TrustTable(kernel).level,
        )

    def now_ns(self) -> int:
        return self._clock()

    def request(
        self,
        role: str,
        *,
        session: str | None = None,
        tool: str | None = None,
        risk: Risk = Risk.R0,
        budget: int = 0,
    ) -> Request:
        """A request stamped with this authority's clock."""
        return Request(
            role=role, session=session, tool=tool, risk=risk, budget=budget, now_ns=self._clock()
        )

    # --- minting ------------------------------------------------------------------------

    def mint(
        self,
        role: str,
        *,
        trust: TrustLevel,
        risk: Risk,
        session: str | None = None,
        principal: str | None = None,
        tools: Iterable[str] | None = None,
        budget: int | None = None,
        ttl_ns: int | None = None,
    ) -> Token:
        """A root token for a process of ``role``. Trust and risk ceilings are
        required (no silent defaults); without ``tools`` any tool, without
        ``budget`` unlimited, without ``ttl_ns`` until revoked."""
        caveats: list[Caveat] = [RoleIs(role), TrustCeiling(trust), RiskCeiling(risk)]
        if session is not None:
            caveats.append(SessionIs(session))
        if tools is not None:
            caveats.append(ToolsAllowed.of(tools))
        if budget is not None:
            caveats.append(BudgetCeiling(budget))
        if ttl_ns is not None:
            if isinstance(ttl_ns, bool) or not 0 < ttl_ns <= MAX_INT64:
                raise InvalidCaveat(f"a lifetime of {ttl_ns!r} ns (must be positive)")
            caveats.append(ExpiresAt(min(MAX_INT64, self._clock() + ttl_ns)))
        return mint_token(
            self._key, token_id=self._new_id(), principal=principal, lineage=(), caveats=caveats
        )

    # --- checking -----------------------------------------------------------------------

    def verify(self, token: bytes, request: Request) -> Grant:
        """What ``token`` grants for ``request``; TokenRejected with the first
        reason it does not (in order: the chain, revocation, expiry, role,
        session, tool, risk, budget)."""
        return self.settle(self.check(self.authenticate(token), request))

    # The same in steps, for a server that checks what it can on its own
    # threads and reads the world (revocations, spending, trust: kernel
    # state) only on the thread that owns it. The order of the refusals is
    # verify's whichever way it is run.

    def authenticate(self, token: bytes) -> Token:
        """The token ``token`` holds if its chain verifies. Pure: reads the key only."""
        return verify_chain(self._key, token)

    def check(
        self,
        token: Token,
        request: Request,
        *,
        role_refusal: tuple[RejectReason, str] | None = None,
    ) -> Checked:
        """The pure checks of an authenticated ``token`` against ``request``
        (expiry, role, session, tool, risk); reads nothing of the world.
        ``role_refusal`` is a refusal the caller found itself (a method its
        role may not call); it ranks with the role check, after expiry."""
        scope = Scope.of(token.caveats)
        found = scope.refusal(request)
        if role_refusal is not None and (found is None or found[0] is not RejectReason.EXPIRED):
            found = role_refusal
        refusal = None
        if found is not None:
            refusal = TokenRejected(*found, principal=token.principal, token_id=token.id)
        return Checked(token, scope, request, refusal)

    def settle(self, checked: Checked) -> Grant:
        """The grant of a checked token, reading the world: revocation first,
        then the refusal the pure checks found, then the budget."""
        t, scope, request = checked.token, checked.scope, checked.request
        self._check_not_revoked(t.id, t.lineage, t.principal)
        if checked.refusal is not None:
            raise checked.refusal
        remaining = self._remaining(t.id, scope.budget, t.lineage)
        if remaining is not None and request.budget > remaining:
            raise TokenRejected(
                RejectReason.BUDGET_EXHAUSTED,
                f"spending {request.budget} needs more than the {remaining} left",
                principal=t.principal,
                token_id=t.id,
            )
        trust = scope.trust
        if t.principal is not None:
            trust = min(trust, self._trust_of(t.principal))
        return Grant(
            token_id=t.id,
            role=request.role,
            session=next(iter(scope.sessions), None),
            tools=scope.tools,
            risk=scope.risk,
            trust=trust,
            budget=remaining,
            budget_ceiling=scope.budget,
            expires_at_ns=scope.expires_at_ns,
            principal=t.principal,
            lineage=t.lineage,
        )

    def remaining(self, grant: Grant) -> int | None:
        """What ``grant``'s holder may spend now (None: unlimited)."""
        return self._remaining(grant.token_id, grant.budget_ceiling, grant.lineage)

    def _remaining(
        self, token_id: bytes, ceiling: int | None, lineage: tuple[Ancestor, ...]
    ) -> int | None:
        left: int | None = None
        for tid, cap in ((token_id, ceiling), *((a.id, a.budget_ceiling) for a in lineage)):
            if cap is not None:
                room = max(0, cap - self._spent(tid))
                left = room if left is None else min(left, room)
        return left

    def _check_not_revoked(
        self, token_id: bytes, lineage: tuple[Ancestor, ...], principal: str | None
    ) -> None:
        if self._is_revoked(token_id):
            raise TokenRejected(
                RejectReason.REVOKED,
                f"token {token_id.hex()} was revoked",
                principal=principal,
                token_id=token_id,
            )
        for generation, anc in enumerate(lineage, start=1):
            if self._is_revoked(anc.id):
                raise TokenRejected(
                    RejectReason.REVOKED,
                    f"its ancestor {anc.id.hex()} ({generation} level(s) up) was revoked",
                    principal=principal,
                    token_id=token_id,
                )

    def recheck(self, grant: Grant) -> None:
        """Whether ``grant`` (settled when a stream opened) still stands:
        TokenRejected naming why not, "token revoked" (the token or an
        ancestor, REVOKED) or "token expired" (by this authority's clock,
        EXPIRED). What else a grant says (role, session, tools) cannot change
        while it is held, and a stream spends nothing."""
        try:
            self._check_not_revoked(grant.token_id, grant.lineage, grant.principal)
        except TokenRejected as exc:
            raise TokenRejected(
                RejectReason.REVOKED,
                f"token revoked while in use: {exc.detail}",
                principal=grant.principal,
                token_id=grant.token_id,
            ) from None
        now = self._clock()
        if grant.expires_at_ns is not None and now >= grant.expires_at_ns:
            raise TokenRejected(
                RejectReason.EXPIRED,
                f"token expired while in use: at {grant.expires_at_ns} ns, "
                f"{now - grant.expires_at_ns} ns ago",
                principal=grant.principal,
                token_id=grant.token_id,
            )

    def recheck_trust(self, grant: Grant) -> None:
        """Whether ``grant``'s principal still has the trust the grant was
        settled at: :class:`TrustLowered` if the trust table now puts it
        lower ("trust lowered to guest while in use"). A rise, or no
        principal (a process token: the table never capped it), stands."""
        principal = grant.principal
        if principal is None:
            return
        level = self._trust_of(principal)
        if level < grant.trust:
            raise TrustLowered(
                f"trust lowered to {level.label} while in use: {principal} was admitted at "
                f"{grant.trust.label} and the trust table now says {level.label}",
                principal=principal,
                level=level,
            )

    # --- spawning -----------------------------------------------------------------------

    def spawn(
        self,
        parent: Grant,
        *,
        budget: int,
        tools: Iterable[str] | None = None,
        risk: Risk | None = None,
        trust: TrustLevel | None = None,
        session: str | None = None,
        expires_at_ns: int | None = None,
    ) -> Token:
        """A sub-task's token under ``parent`` (a grant :meth:`verify` gave).
        Unset arguments inherit the parent's value; ``budget`` is required and
        must be strictly below what the parent may still spend."""

        def refuse(reason: RejectReason, message: str) -> TokenRejected:
            return TokenRejected(
                reason, message, principal=parent.principal, token_id=parent.token_id
            )

        def widening(message: str) -> TokenRejected:
            return refuse(RejectReason.WIDENING, f"spawn refused: {message}")

        if parent.depth + 1 > TOKEN_MAX_SPAWN_DEPTH:
            raise refuse(
                RejectReason.SPAWN_TOO_DEEP,
                f"a sub-task {parent.depth + 1} levels down (at most {TOKEN_MAX_SPAWN_DEPTH})",
            )
        # The grant may be old: the parent can have been revoked, expired or
        # spent since.
        self._check_not_revoked(parent.token_id, parent.lineage, parent.principal)
        now = self._clock()
        if parent.expires_at_ns is not None and now >= parent.expires_at_ns:
            raise refuse(RejectReason.EXPIRED, f"the parent expired at {parent.expires_at_ns} ns")
        check_budget(budget, "child budget")
        left = self.remaining(parent)
        if left is not None and budget >= left:
            raise widening(f"budget {budget} is not below the parent's remaining {left}")

        if tools is None:
            child_tools = parent.tools
        else:
            child_tools = frozenset(ToolsAllowed.of(tools).names)
            extra: frozenset[str] = (
                child_tools - parent.tools if parent.tools is not None else frozenset()
            )
            if extra:
                raise widening(f"tools {sorted(extra)!r} are not the parent's")
        child_risk = parent.risk if risk is None else risk
        if child_risk > parent.risk:
            raise widening(f"risk {Risk(child_risk).name} is above the parent's {parent.risk.name}")
        ceiling = parent.trust
        if parent.principal is not None:
            ceiling = min(ceiling, self._trust_of(parent.principal))
        child_trust = ceiling if trust is None else trust
        if child_trust > ceiling:
            raise widening(
                f"trust {TrustLevel(child_trust).label} is above the parent's {ceiling.label}"
            )
        child_session = parent.session if session is None else check_session(session)
        if parent.session is not None and child_session != parent.session:
            raise widening(f"session {session!r} is not the parent's {parent.session!r}")
        child_expiry = parent.expires_at_ns if expires_at_ns is None else expires_at_ns
        if (
            parent.expires_at_ns is not None
            and child_expiry is not None
            and child_expiry > parent.expires_at_ns
        ):
            raise widening(f"expiry {child_expiry} is after the parent's {parent.expires_at_ns}")

        caveats: list[Caveat] = [
            RoleIs(parent.role),
            TrustCeiling(TrustLevel(child_trust)),
            RiskCeiling(Risk(child_risk)),
            BudgetCeiling(budget),
        ]
        if child_session is not None:
            caveats.append(SessionIs(child_session))
        if child_tools is not None:
            caveats.append(ToolsAllowed.of(child_tools))
        if child_expiry is not None:
            caveats.append(ExpiresAt(child_expiry))
        lineage = (Ancestor(parent.token_id, parent.budget_ceiling), *parent.lineage)
        return mint_token(
            self._key,
            token_id=self._new_id(),
            principal=parent.principal,
            lineage=lineage,
            caveats=caveats,
        )


__all__ = ["Checked", "Clock", "TokenAuthority"]
