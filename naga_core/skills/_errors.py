"""What the skill library refuses, one class per cause, each with its reason."""

from __future__ import annotations

import enum

from naga_core.errors import NagaError, NotFound


class SkillError(NagaError):
    """Root of the skill library's errors."""


class Reason(enum.Enum):
    #: SKILL.md missing, its frontmatter not YAML, or a required field wrong.
    BAD_FORMAT = "bad_format"
    #: A file path outside SKILL.md, scripts/, references/, assets/.
    BAD_PATH = "bad_path"
    #: Too many files or bytes.
    TOO_LARGE = "too_large"
    #: A scope that is not global, session/<id> or peer/<id>.
    BAD_SCOPE = "bad_scope"
    #: The agent (or a peer) asked to write where it may not (global, another's scope).
    SCOPE_DENIED = "scope_denied"
    #: The peer's trust does not allow writing skills.
    TRUST_DENIED = "trust_denied"
    #: A create of a name that exists in the scope, a patch that renames.
    CONFLICT = "conflict"
    #: The poison lint found injection, exfiltration, a secret or a credential URL.
    POISON = "poison"
    #: Near-duplicate of an existing skill.
    DUPLICATE = "duplicate"
    #: The skill does not say what it is for or when it applies, or claims
    #: what the turn's trace does not support.
    UNSUPPORTED = "unsupported"
    #: A patch that changes nothing.
    UNCHANGED = "unchanged"


class SkillRefused(SkillError):
    """A write or a request was refused; ``reason`` says why."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class SkillNotFound(NotFound, SkillError):
    """No such skill (in the scopes asked) or no such version."""


class SkillForgotten(SkillNotFound):
    """A sealed skill object whose subject was forgotten (its key is gone),
    or that does not open: nothing of it can be read any more."""


__all__ = ["Reason", "SkillError", "SkillForgotten", "SkillNotFound", "SkillRefused"]
