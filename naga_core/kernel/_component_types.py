"""The values of the lifecycle planner (``_components``): component specs,
facts, plans and statuses, and the errors it raises. Their rules are in
``_components``'s docstring."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from naga_core.errors import NagaError

_MAX_NAME: Final = 128
_NAME: Final = re.compile(r"[a-z0-9_.-]+")
_FACT: Final = re.compile(r"[a-z][a-z0-9_]*:[a-z0-9_.:/-]+")
_SYNTAX: Final = {_NAME: "[a-z0-9_.-]+", _FACT: "kind:value, e.g. cap:net"}
_NONE: Final[frozenset[str]] = frozenset()


class ComponentError(NagaError):
    """A component spec or a lifecycle request was refused."""


class DependencyCycle(ComponentError):
    """The specs would form a dependency cycle; nothing was changed.

    ``cycle`` runs in requirement order and repeats its first name at the end:
    ``("a", "b", "a")`` means a requires b, which requires a.
    """

    def __init__(self, cycle: tuple[str, ...]) -> None:
        super().__init__("dependency cycle: " + " -> ".join(cycle))
        self.cycle = cycle


class UnknownComponent(ComponentError):
    """No component of that name is registered."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown component: {name!r}")
        self.name = name


def is_fact(requirement: str) -> bool:
    """True for ``kind:value`` facts, false for component graph names."""
    return ":" in requirement


def _check(value: str, pattern: re.Pattern[str], what: str) -> None:
    if len(value) > _MAX_NAME or pattern.fullmatch(value) is None:
        raise ComponentError(f"invalid {what} {value!r}: want {_SYNTAX[pattern]}")


def _one_or_many(values: Iterable[str], what: str) -> frozenset[str]:
    # frozenset("cap:net") would silently become a set of characters.
    if isinstance(values, str):
        raise ComponentError(f"{what} must be a collection of names, not the string {values!r}")
    return frozenset(values)


def check_fact(fact: str) -> None:
    """Refuse a fact that is not ``kind:value``."""
    _check(fact, _FACT, "fact")


@dataclass(frozen=True)
class ComponentSpec:
    """What a component is called, needs and offers. Build with :meth:`of`."""

    name: str
    requires: frozenset[str] = _NONE
    provides: frozenset[str] = _NONE

    def __post_init__(self) -> None:
        _check(self.name, _NAME, "component name")
        for req in sorted(self.requires):
            _check(req, _FACT if is_fact(req) else _NAME, "requirement")
        for alias in sorted(self.provides):
            _check(alias, _NAME, "provided name")
        if self.name in self.provides:
            raise ComponentError(f"{self.name!r} provides its own name implicitly")

    @classmethod
    def of(
        cls, name: str, *, requires: Iterable[str] = (), provides: Iterable[str] = ()
    ) -> ComponentSpec:
        return cls(name, _one_or_many(requires, "requires"), _one_or_many(provides, "provides"))


class ActionKind(StrEnum):
    START = "start"
    STOP = "stop"


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    name: str

    @classmethod
    def start(cls, name: str) -> Action:
        return cls(ActionKind.START, name)

    @classmethod
    def stop(cls, name: str) -> Action:
        return cls(ActionKind.STOP, name)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Plan:
    """Actions for the runtime, in order: all stops, then all starts."""

    actions: tuple[Action, ...] = ()

    def __post_init__(self) -> None:
        kinds = [action.kind for action in self.actions]
        if kinds != sorted(kinds, key=lambda kind: kind is ActionKind.START):
            raise ValueError(f"a plan must stop before it starts: {self}")

    @classmethod
    def empty(cls) -> Plan:
        return cls()

    @classmethod
    def transition(cls, running: Sequence[str], target: Sequence[str]) -> Plan:
        """From ``running`` to ``target``, both given in dependency order."""
        keep, have = set(target), set(running)
        stops = [Action.stop(name) for name in reversed(running) if name not in keep]
        starts = [Action.start(name) for name in target if name not in have]
        return cls((*stops, *starts))

    @property
    def stops(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actions if a.kind is ActionKind.STOP)

    @property
    def starts(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actions if a.kind is ActionKind.START)

    def __iter__(self) -> Iterator[Action]:
        return iter(self.actions)

    def __len__(self) -> int:
        return len(self.actions)

    def __str__(self) -> str:
        return ", ".join(map(str, self.actions)) or "(nothing to do)"


class State(StrEnum):
    ACTIVE = "active"
    PENDING = "pending"
    BLOCKED = "blocked"
    FAILED = "failed"
    DISABLED = "disabled"


@dataclass(frozen=True)
class Status:
    """Why a component is or is not running; ``str()`` is for people."""

    state: State
    missing: tuple[str, ...] = ()
    failed_deps: tuple[str, ...] = ()
    reason: str = ""

    @classmethod
    def failed(cls, reason: str) -> Status:
        return cls(State.FAILED, reason=reason)

    @classmethod
    def pending(cls, missing: Iterable[str]) -> Status:
        """Waiting for facts or names nothing enabled provides yet."""
        return cls(State.PENDING, missing=tuple(sorted(missing)))

    @classmethod
    def blocked(cls, failed_deps: Iterable[str]) -> Status:
        """Cannot run until a failed dependency is retried or replaced."""
        return cls(State.BLOCKED, failed_deps=tuple(sorted(failed_deps)))

    def __str__(self) -> str:
        if self.state is State.PENDING:
            return f"pending (missing: {', '.join(self.missing)})"
        if self.state is State.BLOCKED:
            return f"blocked (dependency failed: {', '.join(self.failed_deps)})"
        if self.state is State.FAILED:
            return f"failed ({self.reason})"
        return str(self.state)


__all__ = [
    "Action",
    "ActionKind",
    "ComponentError",
    "ComponentSpec",
    "DependencyCycle",
    "Plan",
    "State",
    "Status",
    "UnknownComponent",
    "check_fact",
    "is_fact",
]
