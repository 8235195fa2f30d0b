"""Who is calling: the :class:`Authorizer` seam and the owner credential.

Every RPC passes through exactly one ``Authorizer.authorize`` call (made by
the bridge, before the request is decoded) that turns the call's metadata
into a :class:`Principal` or refuses it. Today the only authorizer is the
owner credential: 32 random bytes the core writes to
``$NAGA_HOME/run/owner.token`` (0600) at every start, presented as
``authorization: Naga <base64>``. Capability tokens (naga_core.authz) plug in
behind the same protocol; the owner credential stays, as the owner's CLI
path.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from naga.constants import OWNER_TOKEN_BYTES
from naga_core.daemon._errors import CredentialMissing, CredentialRefused, RunDirError

#: The metadata key and scheme of a credential (keys are lowercase in gRPC).
AUTH_KEY = "authorization"
AUTH_SCHEME = "Naga "
# A credential longer than this is not one we issue; refuse before decoding.
_MAX_CREDENTIAL_CHARS = 4096

Metadata = Sequence[tuple[str, str | bytes]]


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller of one RPC."""

    name: str
    owner: bool

    @classmethod
    def the_owner(cls) -> Principal:
        return cls("owner", owner=True)


class Authorizer(Protocol):
    """Decides who a call comes from, once per RPC, on a server thread.

    Raise :class:`CredentialMissing` (UNAUTHENTICATED) or
    :class:`CredentialRefused` (PERMISSION_DENIED); ``method`` is the full
    gRPC method name (``/naga.v1.KernelService/SetSetting``) for authorizers
    that grant per method. Must not block: it runs before the call reaches
    the core's loop.
    """

    def authorize(self, metadata: Metadata, method: str) -> Principal: ...


def presented_credential(metadata: Metadata) -> bytes:
    """The raw credential bytes of a call, or the reason it has none usable."""
    values = [v for k, v in metadata if k == AUTH_KEY]
    if not values:
        raise CredentialMissing(
            "no credential: send metadata 'authorization: Naga <base64 credential>'"
        )
    if len(values) > 1:
        raise CredentialRefused("more than one authorization entry")
    value = values[0]
    if isinstance(value, bytes):
        raise CredentialRefused("the authorization entry must be text, not binary metadata")
    if not value.startswith(AUTH_SCHEME):
        raise CredentialRefused("the authorization entry must use the 'Naga' scheme")
    encoded = value[len(AUTH_SCHEME) :]
    if len(encoded) > _MAX_CREDENTIAL_CHARS:
        raise CredentialRefused("the credential is too long")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise CredentialRefused("the credential is not valid base64") from None


class OwnerCredential:
    """The owner's credential for one run of the core. Build with :meth:`create`."""

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

    def authorize(self, metadata: Metadata, method: str) -> Principal:
        presented = presented_credential(metadata)
        if not hmac.compare_digest(presented, self._secret):
            raise CredentialRefused(
                f"credential not accepted for {method} (the core makes a new owner "
                "credential at every start: read run/owner.token again)"
            )
        return Principal.the_owner()


__all__ = [
    "AUTH_KEY",
    "AUTH_SCHEME",
    "Authorizer",
    "Metadata",
    "OwnerCredential",
    "Principal",
    "presented_credential",
]
