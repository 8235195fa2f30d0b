"""The typed client of naga-core (docs/sdk.md).

``Client`` is the connection; its calls come in one group per service
(``_ledger_calls``, ``_kernel_calls``, ``_authz_calls``, ``_plugin_calls``,
``_turn_calls``), each a mixin over the shared call plumbing of ``_rpc``.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable

from google.protobuf.message import Message

from naga.constants import RPC_DEADLINE_S
from naga.sdk._address import CoreAddress, read_credential
from naga.sdk._approval_calls import ApprovalCalls
from naga.sdk._authz_calls import AuthzCalls, Issued
from naga.sdk._console_admin_calls import ConsoleAdminCalls
from naga.sdk._console_calls import ConsoleCalls
from naga.sdk._install_calls import InstallCalls
from naga.sdk._job_calls import JobCalls
from naga.sdk._kernel_calls import KernelCalls
from naga.sdk._ledger_calls import LedgerCalls, Subscription
from naga.sdk._memory_calls import MemoryCalls
from naga.sdk._plugin_calls import PluginCalls
from naga.sdk._rpc import Events, M
from naga.sdk._transport import Transport, unavailable
from naga.sdk._turn_calls import TurnCalls, TurnEvents
from naga.sdk._wechat_calls import WechatCalls
from naga.tokens import CAPABILITY_SCHEME, Token


class Client(
    LedgerCalls,
    KernelCalls,
    AuthzCalls,
    PluginCalls,
    TurnCalls,
    ApprovalCalls,
    WechatCalls,
    ConsoleCalls,
    InstallCalls,
    JobCalls,
    MemoryCalls,
    ConsoleAdminCalls,
):
    """A connection to one naga-core. Build with :meth:`connect`.

    Every method is one RPC with a deadline (``timeout``, default
    ``RPC_DEADLINE_S``) and raises only :class:`naga.sdk.errors.SdkError`
    subclasses. After UNAVAILABLE the client reconnects on the next call
    (re-reading the owner credential file, which a restarted core rewrote);
    reads are retried on a fresh connection, writes are not. Safe to share
    between threads.

    :meth:`with_credential` gives a client presenting another credential
    over this one's connection (no new socket, no handshake): a process that
    gets a fresh token per task keeps one connection for its whole life::

        core = Client.connect(socket, first_token)
        turn = core.with_credential(job_token)  # same channel, other token

    The connection is this client's: a reset after UNAVAILABLE on any of
    them reconnects it for all; closing a derived client leaves it open;
    closing this one closes it (a later call on any of them connects again).
    """

    @classmethod
    def connect(
        cls,
        target: str | os.PathLike[str] | None = None,
        credential: bytes | Token | None = None,
        *,
        timeout: float = RPC_DEADLINE_S,
    ) -> Client:
        """Connect to the core of a home directory (default ``$NAGA_HOME``,
        else ``~/.naga``) or at a socket path.

        ``credential`` is the owner credential's bytes or a capability
        token (a :class:`naga.tokens.Token`, e.g. one narrowed offline with
        ``attenuate``); by default the owner credential in the run directory
        beside the socket, read again at every reconnect. Raises
        :class:`~naga.sdk.errors.CoreUnavailable` (with how to start the
        core) when no core listens there.
        """
        address = CoreAddress.resolve(target)
        if not address.socket_exists():
            raise unavailable(address, "no socket")
        if credential is None:
            path = address.credential_file
            transport = Transport(address, lambda: _owner_value(read_credential(path)))
        else:
            transport = Transport(address, _fixed(credential))
        return cls(transport, timeout)

    @classmethod
    def presenting(
        cls,
        target: str | os.PathLike[str],
        authorization: str,
        *,
        timeout: float = RPC_DEADLINE_S,
    ) -> Client:
        """A client of the core at ``target`` presenting ``authorization``,
        an ``authorization`` header value as it was handed over (a process
        the core started gets its token so). Connects at the first call."""
        return cls(Transport(CoreAddress.resolve(target), lambda: authorization), timeout)

    def call(
        self,
        method: str,
        request: Message,
        response: type[M],
        *,
        read: bool = False,
        timeout: float | None = None,
    ) -> M:
        """One unary call by its full name (``/naga.v1.KernelService/GetTrust``),
        for a caller that serves the core's calls by name; errors as every
        call's. ``read``: it changes nothing, so it is retried after
        UNAVAILABLE."""
        return self._call(method, request, response, read=read, timeout=timeout)

    def stream(
        self, method: str, request: Message, response: type[M], *, timeout: float | None = None
    ) -> Events[M]:
        """One server-streaming call by its full name; iterate for its
        messages, ``cancel()`` to end it."""
        return Events(self._stream(method, request, timeout), response, method)

    def with_credential(self, credential: bytes | Token) -> Client:
        """A client sharing this one's connection that presents ``credential``
        (owner credential bytes or a capability token) on each of its calls,
        with this client's default deadline. Cheap: nothing is connected or
        sent. Closing it leaves the connection open (it is this client's)."""
        # Callers may be untyped: bytes() of an int would be a silent empty credential.
        if not isinstance(credential, Token | bytes):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"credential must be a naga.tokens.Token or bytes, not {type(credential).__name__}"
            )
        return type(self)(self._t.derive(_fixed(credential)), self._timeout)

    @property
    def socket(self) -> str:
        return self._t.address.socket

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _fixed(credential: bytes | Token) -> Callable[[], str]:
    """The authorization value of a credential given once (never re-read)."""
    if isinstance(credential, Token):
        value = f"{CAPABILITY_SCHEME} {_b64(credential.to_bytes())}"
    else:
        value = _owner_value(bytes(credential))
    return lambda: value


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _owner_value(secret: bytes) -> str:
    return "Naga " + _b64(secret)


__all__ = ["Client", "Issued", "Subscription", "TurnEvents"]
