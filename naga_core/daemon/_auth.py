"""Who is calling: the :class:`Authorizer` seam, and the owner credential.

Every RPC passes through one authorizer, in three steps the bridge runs in
order (docs/adr/0004-grpc-trio-bridge.md):

1. ``Authorizer.authorize(metadata, method) -> Caller`` on the server
   thread, before the request is decoded: who presents what (the owner
   credential compared, a capability token's HMAC chain checked);
2. ``Caller.check(request) -> Admission`` on the server thread, after
   decoding: pure checks against the request's fields (a token's expiry,
   role, session, tool, risk);
3. ``Admission.admit() -> Principal`` on the core's trio loop, just before
   the handler: what needs kernel state (revocation, budget spent, the
   principal's current trust), and recording violations.
4. For a server-streaming call, ``Admission.standing(principal) -> Standing``
   on the loop: checked again before every batch the stream sends, and
   waking the stream when it may have changed (a revocation, the expiry, a
   change to the trust table).

Steps 1 and 2 must not touch the kernel; step 3 is the only one that may.

The owner credential is 32 random bytes the core writes to
``$NAGA_HOME/run/owner.token`` (0600) at every start, presented as
``authorization: Naga <base64>``. Capability tokens are presented as
``authorization: Capability <base64>`` (naga_core.daemon._credentials).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import math
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import trio
from google.protobuf.message import Message

from naga.constants import OWNER_TOKEN_BYTES, TOKEN_MAX_BYTES
from naga.tokens import CAPABILITY_SCHEME, RejectReason
from naga_core.authz import Grant, TokenRejected
from naga_core.daemon._errors import CredentialMissing, CredentialRefused, RunDirError

#: The metadata key and the owner's scheme (keys are lowercase in gRPC).
AUTH_KEY = "authorization"
OWNER_SCHEME = "Naga"
# The owner credential is 44 base64 characters; longer is not one we issue.
_MAX_OWNER_CHARS = 4096
# A token's base64 at the size limit; longer is refused as OVERSIZE unread.
_MAX_TOKEN_CHARS = 4 * ((TOKEN_MAX_BYTES + 2) // 3)

Metadata = Sequence[tuple[str, str | bytes]]


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller of one RPC: the owner, or the holder of a
    capability token of ``role`` with what it grants now (``grant``)."""

    name: str
    owner: bool
    role: str = "owner"
    grant: Grant | None = None

    @classmethod
    def the_owner(cls) -> Principal:
        return cls("owner", owner=True)

    @classmethod
    def holder(cls, grant: Grant) -> Principal:
        who = grant.principal or f"{grant.role} token {grant.token_id.hex()[:12]}"
        return cls(who, owner=False, role=grant.role, grant=grant)


class Standing(Protocol):
    """Whether an open stream's caller is still admitted (on the loop).

    A server-streaming call is admitted once, when it opens; its token can
    be revoked or expire, and its principal's trust be lowered, while it is
    open. The bridge asks :meth:`check` before each batch leaves the loop,
    and wakes a stream waiting for its next batch at :meth:`deadline` and
    whenever :meth:`waking` is told (a revocation, a trust-table change), so
    an idle stream is cut too.
    """

    def check(self) -> None:
        """Raise the refusal (a NagaError) if the caller no longer stands."""
        ...

    def deadline(self) -> float:
        """The trio time by which to check again though nothing woke the
        stream (its expiry; ``math.inf``: never)."""
        ...

    def waking(self, scope: trio.CancelScope) -> contextlib.AbstractContextManager[None]:
        """While inside, cancel ``scope`` when the standing may have changed."""
        ...


class Admission(Protocol):
    """A call that passed the server thread's checks; finished on the loop."""

    def admit(self) -> Principal:
        """On the core's trio loop, just before the handler: the principal,
        or the refusal (raised)."""
        ...

    def standing(self, principal: Principal) -> Standing:
        """For a stream, on the loop after :meth:`admit`: how it stays admitted."""
        ...


class Caller(Protocol):
    """Who presents what, authenticated; not yet checked against the request."""

    def check(self, request: Message) -> Admission:
        """Pure checks against the decoded request (server thread)."""
        ...


class Authorizer(Protocol):
    """Decides who a call comes from, once per RPC, on a server thread.

    Raise :class:`CredentialMissing` (UNAUTHENTICATED),
    :class:`CredentialRefused` (PERMISSION_DENIED) or a ``TokenRejected``
    (its reason's status); ``method`` is the full gRPC method name
    (``/naga.v1.KernelService/SetSetting``). Must not block or read kernel
    state: it runs before the call reaches the core's loop.
    """

    def authorize(self, metadata: Metadata, method: str) -> Caller: ...


class Unconditional:
    """The standing of a caller nothing can withdraw while the core runs
    (the owner: its credential changes only with the core)."""

    def check(self) -> None:
        return None

    def deadline(self) -> float:
        return math.inf

    def waking(self, scope: trio.CancelScope) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


@dataclass(frozen=True, slots=True)
class OwnerCall:
    """A call authenticated as the owner's: nothing more to check."""

    def check(self, request: Message) -> OwnerCall:
        return self

    def admit(self) -> Principal:
        return Principal.the_owner()

    def standing(self, principal: Principal) -> Standing:
        return Unconditional()


def presented_credential(metadata: Metadata) -> tuple[str, bytes]:
    """The scheme (``Naga`` or ``Capability``) and raw bytes of a call's
    credential, or the reason it has none usable."""
    values = [v for k, v in metadata if k == AUTH_KEY]
    if not values:
        raise CredentialMissing(
            "no credential: send metadata 'authorization: Naga <base64 owner credential>' "
            "or 'authorization: Capability <base64 token>'"
        )
    if len(values) > 1:
        raise CredentialRefused("more than one authorization entry")
    value = values[0]
    if isinstance(value, bytes):
        raise CredentialRefused("the authorization entry must be text, not binary metadata")
    scheme, _, encoded = value.partition(" ")
    if scheme == OWNER_SCHEME:
        limit = _MAX_OWNER_CHARS
    elif scheme == CAPABILITY_SCHEME:
        limit = _MAX_TOKEN_CHARS
    else:
        raise CredentialRefused(
            f"the authorization entry must use the '{OWNER_SCHEME}' or '{CAPABILITY_SCHEME}' scheme"
        )
    if len(encoded) > limit:
        if scheme == CAPABILITY_SCHEME:
            raise TokenRejected(
                RejectReason.OVERSIZE,
                f"{len(encoded)} base64 characters (a token is at most {TOKEN_MAX_BYTES} bytes)",
            )
        raise CredentialRefused("the credential is too long")
    try:
        return scheme, base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise CredentialRefused("the credential is not valid base64") from None


class OwnerCredential:
    """The owner's credential for one run of the core. Build with :meth:`create`.

    On its own it is an :class:`Authorizer` that admits the owner to any
    method (used by the bridge's own tests and benchmark); the core combines
    it with capability tokens and the policy table.
    """

    def __init__(self, secret: bytes) -> None:
        if len(secret) != OWNER_TOKEN_BYTES:
            raise ValueError(f"an owner credential is {OWNER_TOKEN_BYTES} bytes")
        self._secret = secret

    @classmethod
    def create(cls, path: str) -> OwnerCredential:
        """Generate a fresh credential and write it to ``path`` (0600),
        replacing the previous run's atomically."""
        secret = secrets.token_bytes(OWNER_TOKEN_BYTES)
        tmp = path + ".tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, secret)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
        except OSError as exc:
            raise RunDirError(f"cannot write the owner credential {path}: {exc}") from None
        return cls(secret)

    def verify(self, presented: bytes, method: str) -> OwnerCall:
        """The owner's call if ``presented`` is this run's credential."""
        if not hmac.compare_digest(presented, self._secret):
            raise CredentialRefused(
                f"credential not accepted for {method} (the core makes a new owner "
                "credential at every start: read run/owner.token again)"
            )
        return OwnerCall()

    def authorize(self, metadata: Metadata, method: str) -> OwnerCall:
        scheme, presented = presented_credential(metadata)
        if scheme != OWNER_SCHEME:
            raise CredentialRefused(f"{method} accepts only the owner credential here")
        return self.verify(presented, method)


__all__ = [
    "AUTH_KEY",
    "OWNER_SCHEME",
    "Admission",
    "Authorizer",
    "Caller",
    "Metadata",
    "OwnerCall",
    "OwnerCredential",
    "Principal",
    "Standing",
    "Unconditional",
    "presented_credential",
]
