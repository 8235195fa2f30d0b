"""The client's calls of the ConsoleAdminService: the owner's changes that
the console makes too (docs/adr/0029-console-owner-changes.md). With the
owner credential ``console_session`` stays empty; the gateway passes the
owner's console login."""

from __future__ import annotations

from naga.sdk._rpc import Rpc
from naga.v1 import console_admin_pb2 as capb

_ADMIN = "/naga.v1.ConsoleAdminService/"


class ConsoleAdminCalls(Rpc):
    def rename_session(
        self, session: str, title: str, *, console_session: str = "", timeout: float | None = None
    ) -> capb.SessionChangeResponse:
        """Give ``session`` a title (empty: none); a ledger registration."""
        req = capb.RenameSessionRequest(
            console_session=console_session, session=session, title=title
        )
        return self._write(_ADMIN + "RenameSession", req, capb.SessionChangeResponse, timeout)

    def archive_session(
        self,
        session: str,
        archived: bool = True,
        *,
        console_session: str = "",
        timeout: float | None = None,
    ) -> capb.SessionChangeResponse:
        """Archive ``session`` (or, with ``archived=False``, bring it back).
        The answer comes once the archive is recorded; ``distilling`` says
        the session's distillation was queued in the core's background
        (ADR 0050): its outcome is the session's next ``memory.distill``
        record."""
        req = capb.ArchiveSessionRequest(
            console_session=console_session, session=session, archived=archived
        )
        return self._write(_ADMIN + "ArchiveSession", req, capb.SessionChangeResponse, timeout)

    def core_log(
        self, request: capb.ReadLogRequest, *, timeout: float | None = None
    ) -> capb.ReadLogResponse:
        """A page of the core's log, newest first."""
        return self._read(_ADMIN + "ReadLog", request, capb.ReadLogResponse, timeout)

    def providers(
        self, *, console_session: str = "", timeout: float | None = None
    ) -> capb.ListProvidersResponse:
        """The configured model providers (never a key) and which answers now."""
        req = capb.ListProvidersRequest(console_session=console_session)
        return self._read(_ADMIN + "ListProviders", req, capb.ListProvidersResponse, timeout)


__all__ = ["ConsoleAdminCalls"]
