"""No code decides on a gRPC status code's name or on a message's words
(docs/design/naming.md, "Errors"): callers decide on the core's refusal
(``naga.v1.Refusal``, the ``naga-refusal`` trailer) or on an error's class.
Status names may be shown to people (``code`` fields, messages), never
compared. Checked with ``ast`` over the packages, with a self-test."""

from __future__ import annotations

import ast

import pytest

from tests.architecture.imports import Module, load_tree

#: grpc.StatusCode names.
STATUS_NAMES = frozenset(
    {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    }
)
#: Names of what holds a message's words.
_WORDS = ("detail", "details", "message", "msg", "text_of_error")


def _status_constants(node: ast.AST) -> bool:
    """Whether ``node`` is a status name, or a collection of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in STATUS_NAMES
    if isinstance(node, ast.Set | ast.Tuple | ast.List):
        return any(_status_constants(e) for e in node.elts)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("frozenset", "set"):
        return any(_status_constants(a) for a in node.args)
    return False


def _words(node: ast.AST) -> bool:
    """Whether ``node`` is a message's text: ``detail``, ``x.message``,
    ``exc.details()``, ``str(exc)``."""
    if isinstance(node, ast.Call):
        if getattr(node.func, "id", None) == "str" and node.args:
            return True
        return _words(node.func)
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return any(w in name.lower() for w in _WORDS)


def branches(source: str, filename: str) -> list[str]:
    """Each place ``source`` decides on a status name or a message's words."""
    found: list[str] = []
    tree = ast.parse(source, filename=filename)
    names: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        # Module-level sets of status names (_FINAL_CODES = frozenset({...})).
        if isinstance(node, ast.Assign) and _status_constants(node.value):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node.value
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_status_constants(s) for s in sides) or any(
                isinstance(s, ast.Name) and s.id in names for s in sides
            ):
                found.append(f"{filename}:{node.lineno}: compares a status name")
            elif any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) and (
                isinstance(node.left, ast.Constant)
                and isinstance(node.left.value, str)
                and any(_words(c) for c in node.comparators)
            ):
                found.append(f"{filename}:{node.lineno}: looks for words in a message")
        elif isinstance(node, ast.match_case) and _status_constants(
            getattr(node.pattern, "value", ast.Constant(None))
        ):
            found.append(f"{filename}:{node.pattern.lineno}: matches a status name")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and _words(node.func.value)
        ):
            found.append(f"{filename}:{node.lineno}: decides on a message's words")
    return sorted(set(found))


@pytest.fixture(scope="module")
def tree() -> list[Module]:
    return [m for m in load_tree() if not m.name.startswith("naga.v1.")]


def test_no_code_branches_on_status_names_or_message_words(tree: list[Module]) -> None:
    found = [b for m in tree for b in branches(m.source, m.filename)]
    assert found == [], "decide on the refusal or the error's class:\n" + "\n".join(found)


_BRANCHING = {
    "equal to a name": 'if exc.code == "FAILED_PRECONDITION":\n    pass\n',
    "not equal": 'if exc.code != "UNAVAILABLE":\n    pass\n',
    "in a set": 'if exc.code in {"NOT_FOUND", "UNAUTHENTICATED"}:\n    pass\n',
    "in a named set": '_FINAL = frozenset({"UNIMPLEMENTED"})\nok = code in _FINAL\n',
    "a message prefix": 'if detail.startswith("plugin "):\n    pass\n',
    "words in str(exc)": 'if "runs no turn" in str(exc):\n    pass\n',
    "words in a message": 'ok = "budget" in exc.message\n',
    "a match": 'match code:\n    case "ABORTED":\n        pass\n',
}


@pytest.mark.parametrize("source", _BRANCHING.values(), ids=_BRANCHING.keys())
def test_the_check_finds_each_kind(source: str) -> None:
    assert len(branches(source, "x.py")) == 1


_FINE = {
    "a status name shown": 'raise CoreCallFailed("the turn ended", "ABORTED")\n',
    "a code kept": 'def f(code: str = "UNAVAILABLE") -> str:\n    return code\n',
    "a refusal": "if exc.refusal != Refusal.REFUSAL_NO_TURN_RUNNING:\n    raise\n",
    "a class": "if isinstance(exc, CoreUnavailable):\n    pass\n",
    "other strings": 'if kind == "turn.final" or name.startswith("_"):\n    pass\n',
}


@pytest.mark.parametrize("source", _FINE.values(), ids=_FINE.keys())
def test_the_check_lets_the_rest_pass(source: str) -> None:
    assert branches(source, "x.py") == []
