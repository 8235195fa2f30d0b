"""A seccomp policy as plain data: what each syscall gets, and why.

The profile holds one :class:`SeccompPolicy`; the child compiles it with
libseccomp (``sandbox._seccomp``); docs/design/sandbox.md lists the same
rules, and a test keeps the two in step.
"""

from __future__ import annotations

import enum
import errno
from collections.abc import Iterable
from dataclasses import dataclass


class Action(enum.Enum):
    ALLOW = "allow"
    #: Fail with the rule's errno; Python raises a clean ``OSError``.
    ERRNO = "errno"
    #: Kill the whole process with SIGSYS (SECCOMP_RET_KILL_PROCESS).
    KILL_PROCESS = "kill"


class Compare(enum.Enum):
    EQ = "eq"
    NE = "ne"
    #: ``(argument & mask) == value``
    MASKED_EQ = "masked_eq"


@dataclass(frozen=True, slots=True)
class ArgCheck:
    """A condition on syscall argument ``index`` (0-based)."""

    index: int
    op: Compare
    value: int
    mask: int = 0
    #: Compare with the sandboxed process's own pid, which only the child knows.
    own_pid: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.index <= 5:
            raise ValueError(f"syscall argument index must be 0..5, got {self.index}")
        if not 0 <= self.value < 1 << 64 or not 0 <= self.mask < 1 << 64:
            raise ValueError("syscall argument values are unsigned 64-bit")

    @classmethod
    def eq(cls, index: int, value: int) -> ArgCheck:
        return cls(index, Compare.EQ, value)

    @classmethod
    def bits_clear(cls, index: int, bits: int) -> ArgCheck:
        """None of ``bits`` is set in the argument."""
        return cls(index, Compare.MASKED_EQ, 0, bits)

    @classmethod
    def masked(cls, index: int, mask: int, value: int) -> ArgCheck:
        return cls(index, Compare.MASKED_EQ, value, mask)

    @classmethod
    def is_own_pid(cls, index: int) -> ArgCheck:
        return cls(index, Compare.EQ, 0, own_pid=True)


@dataclass(frozen=True, slots=True)
class Rule:
    """``action`` for ``syscall`` when all ``args`` conditions hold.

    Rules with the same syscall and action are alternatives (any may match).
    """

    syscall: str
    action: Action
    why: str
    errno: int = 0
    args: tuple[ArgCheck, ...] = ()

    def __post_init__(self) -> None:
        if not self.syscall or not self.syscall.replace("_", "").isalnum():
            raise ValueError(f"not a syscall name: {self.syscall!r}")
        if (self.action is Action.ERRNO) != (self.errno > 0):
            raise ValueError(f"{self.syscall}: an errno goes with the ERRNO action only")
        if not self.why:
            raise ValueError(f"{self.syscall}: every rule says why")


@dataclass(frozen=True, slots=True)
class SeccompPolicy:
    """Default deny: a syscall no rule matches fails with ``default_errno``."""

    rules: tuple[Rule, ...]
    default_errno: int = errno.EPERM

    def syscalls(self, action: Action) -> frozenset[str]:
        """Syscalls with at least one rule of ``action`` (conditional or not)."""
        return frozenset(r.syscall for r in self.rules if r.action is action)

    def rules_for(self, syscall: str) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.syscall == syscall)

    def unconditional(self, syscall: str) -> Action | None:
        """The action a call to ``syscall`` gets whatever its arguments: the
        action of an argument-free rule, or ``None`` when it depends on them
        (or no rule names it, in which case the default applies)."""
        for rule in self.rules_for(syscall):
            if not rule.args:
                return rule.action
        return None


def allow(names: str, why: str) -> list[Rule]:
    """Unconditional ALLOW rules for each space-separated name."""
    return [Rule(name, Action.ALLOW, why) for name in names.split()]


def allow_if(name: str, why: str, *checks: ArgCheck) -> Rule:
    return Rule(name, Action.ALLOW, why, args=checks)


def allow_values(name: str, index: int, values: Iterable[int], why: str) -> list[Rule]:
    """ALLOW ``name`` when argument ``index`` equals one of ``values``.

    An allowlist compared on all 64 bits is safe against the kernel reading
    only the low 32 (ioctl requests, fcntl commands): junk in the upper half
    makes the value match nothing.
    """
    return [Rule(name, Action.ALLOW, why, args=(ArgCheck.eq(index, v),)) for v in values]


def deny(names: str, why: str, err: int = errno.EPERM) -> list[Rule]:
    return [Rule(name, Action.ERRNO, why, errno=err) for name in names.split()]


def kill(names: str, why: str) -> list[Rule]:
    return [Rule(name, Action.KILL_PROCESS, why) for name in names.split()]
