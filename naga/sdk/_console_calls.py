"""The client's calls of the ConsoleService: the owner's login links for the
WebChat console (docs/adr/0007-console-owner-proof.md)."""

from __future__ import annotations

from naga.sdk._rpc import Rpc
from naga.v1 import console_pb2 as cnpb

_CONSOLE = "/naga.v1.ConsoleService/"


class ConsoleCalls(Rpc):
    def console_login(self, *, timeout: float | None = None) -> cnpb.IssueLoginResponse:
        """A one-time console login code (owner only) and, when the core
        runs a gateway, its login link (``url``). Not retried: each call
        issues a new code."""
        req = cnpb.IssueLoginRequest()
        return self._write(_CONSOLE + "IssueLogin", req, cnpb.IssueLoginResponse, timeout)

    def revoke_console_sessions(
        self, reason: str = "", *, timeout: float | None = None
    ) -> cnpb.RevokeSessionsResponse:
        """End every console login (owner only): the core writes a new
        console key, and restarts its gateway so open connections drop."""
        req = cnpb.RevokeSessionsRequest(reason=reason)
        return self._write(_CONSOLE + "RevokeSessions", req, cnpb.RevokeSessionsResponse, timeout)


__all__ = ["ConsoleCalls"]
