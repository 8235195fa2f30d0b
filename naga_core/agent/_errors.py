"""Errors of the agent side of the core: turns, executors, model calls."""

from __future__ import annotations

from naga_core.errors import NagaError


class AgentError(NagaError):
    """Root of the agent package's errors."""


class NoModelProvider(AgentError):
    """No provider worker runs (no providers.json, or it was refused)."""


class NoExecutor(AgentError):
    """No executor of the pool could take the turn."""


class SessionNotFound(AgentError):
    """No session of that name (NOT_FOUND)."""


class TurnConflict(AgentError):
    """The session runs a turn already, or none to steer or abort, or a call
    names a turn its token is not for (FAILED_PRECONDITION)."""


class NoTurnRunning(TurnConflict):
    """The session runs no turn to steer or abort (it may just have ended)."""


class BadImages(AgentError):
    """A turn's images are refused: too many, too large, not an image
    (INVALID_ARGUMENT)."""


class AgentUnavailable(AgentError):
    """The agent side is not running yet, or is stopping (UNAVAILABLE)."""


__all__ = [
    "AgentError",
    "AgentUnavailable",
    "BadImages",
    "NoExecutor",
    "NoModelProvider",
    "NoTurnRunning",
    "SessionNotFound",
    "TurnConflict",
]
