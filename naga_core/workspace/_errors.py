"""What the workspace refuses, one class per cause, each with its reason."""

from __future__ import annotations

import enum

from naga_core.errors import NagaError


class WorkspaceError(NagaError):
    """Root of the workspace's errors."""


class Reason(enum.Enum):
    #: Absolute, empty, '..', NUL, or otherwise not a path inside the workspace.
    BAD_PATH = "bad_path"
    #: A parent of the path is a symlink or a file: writing there would leave the view.
    THROUGH_LINK = "through_link"
    #: The path is a directory where a file was asked for (or the reverse).
    WRONG_KIND = "wrong_kind"
    #: Nothing at the path.
    MISSING = "missing"
    #: A change set that does not decode or names a blob the store lacks.
    BAD_CHANGE_SET = "bad_change_set"
    #: A file larger than the workspace's limit.
    TOO_LARGE = "too_large"


class PathRefused(WorkspaceError):
    """A path (or what it names) cannot be used; ``reason`` says why."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


__all__ = ["PathRefused", "Reason", "WorkspaceError"]
