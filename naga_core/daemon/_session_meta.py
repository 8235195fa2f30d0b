"""The owner's names and archive marks for sessions: kernel state, so a
rename or an archive is a registration in the ledger that ``naga rollback``
undoes, and the session list (TurnService.ListSessions, the console's side
bar, ``naga session list``) reads them back from the state."""

from __future__ import annotations

from naga.v1 import turn_pb2 as tpb
from naga_core.agent import ARCHIVED_FAMILY
from naga_core.daemon._core import Core
from naga_core.daemon._errors import RequestRefused

TITLE_FAMILY = "session.title"
MAX_TITLE_CHARS = 80


def check_title(title: str) -> str:
    """A title as shown (stripped); empty takes the title away."""
    shown = title.strip()
    if len(shown) > MAX_TITLE_CHARS:
        raise RequestRefused.invalid(
            f"title has {len(shown)} characters; at most {MAX_TITLE_CHARS} are accepted"
        )
    if shown and not shown.isprintable():
        raise RequestRefused.invalid("title contains control characters (newlines, tabs)")
    return shown


class SessionMeta:
    """Titles and archive marks over one core's kernel (on the trio thread)."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def title(self, session: str) -> str:
        value = self._core.kernel.state.get((TITLE_FAMILY, session))
        return value if isinstance(value, str) else ""

    def archived(self, session: str) -> bool:
        return self._core.kernel.state.get((ARCHIVED_FAMILY, session)) is True

    def decorate(self, summary: tpb.SessionSummary) -> tpb.SessionSummary:
        summary.title = self.title(summary.session)
        summary.archived = self.archived(summary.session)
        return summary

    def rename(self, session: str, title: str) -> int | None:
        """Journal the new title; None when it already had it."""
        if title == self.title(session):
            return None
        words = f"rename session {session} to {title!r}" if title else f"untitle session {session}"
        kernel = self._core.kernel
        return self._core.write(
            lambda: kernel.register(TITLE_FAMILY, session, title or None, description=words)
        )

    def archive(self, session: str, archived: bool) -> int | None:
        """Journal the archive mark; None when it already was so."""
        if archived == self.archived(session):
            return None
        words = f"{'archive' if archived else 'unarchive'} session {session}"
        kernel = self._core.kernel
        return self._core.write(
            lambda: kernel.register(
                ARCHIVED_FAMILY, session, True if archived else None, description=words
            )
        )


__all__ = ["ARCHIVED_FAMILY", "MAX_TITLE_CHARS", "TITLE_FAMILY", "SessionMeta", "check_title"]
