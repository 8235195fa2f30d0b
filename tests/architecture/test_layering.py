"""Import layering between Naga's top-level packages (SPEC sections 1 and 2).

Only naga-core is privileged. The gateway, the plugins and the sandbox run
in other, sandboxed processes, so importing ``naga_core`` from them would
either drag privileged code into a sandbox or hide a cross-process call
behind a function call. They talk to the core over the gRPC contracts in
``naga`` instead. ``naga`` itself is the bottom layer that every process
shares, so it may import none of the others.

The rules are checked statically with ``ast``: nothing is imported, so a
violation is reported even in code that no test executes (a function body,
an ``if TYPE_CHECKING:`` block).
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Top-level package -> top-level packages its modules must not import.
FORBIDDEN: dict[str, frozenset[str]] = {
    "naga_gateway": frozenset({"naga_core"}),
    "naga_plugins": frozenset({"naga_core"}),
    "sandbox": frozenset({"naga_core"}),
    "naga": frozenset({"naga_core", "naga_gateway", "naga_plugins", "sandbox"}),
}

#: Calls that import a module named by their first (string) argument.
_DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


@dataclass(frozen=True)
class Violation:
    filename: str
    line: int
    module: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}: imports {self.module}"


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` for every import in ``tree``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            # A relative import resolves inside the importing top-level
            # package (going above it is an ImportError), so it can never
            # reach another top-level package.
            if node.level == 0 and node.module is not None:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if (
                name in _DYNAMIC_IMPORTERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.append((node.lineno, node.args[0].value))
    return found


def find_forbidden_imports(
    source: str, filename: str, forbidden: Collection[str]
) -> list[Violation]:
    """Imports in ``source`` of any module in (or under) a ``forbidden`` package."""
    tree = ast.parse(source, filename=filename)
    return [
        Violation(filename, line, module)
        for line, module in sorted(_imported_modules(tree))
        if module.split(".", 1)[0] in forbidden
    ]


def _sources(package: str) -> list[Path]:
    root = REPO_ROOT / package
    return sorted(
        path
        for pattern in ("*.py", "*.pyi")
        for path in root.rglob(pattern)
        if "__pycache__" not in path.parts
    )


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_respect_layering(package: str) -> None:
    sources = _sources(package)
    # An empty list would make this test pass vacuously after a rename.
    assert sources, f"no Python files found under {package}/"
    violations = [
        violation
        for path in sources
        for violation in find_forbidden_imports(
            path.read_text(encoding="utf-8"),
            path.relative_to(REPO_ROOT).as_posix(),
            FORBIDDEN[package],
        )
    ]
    if violations:
        allowed = sorted(FORBIDDEN[package])
        pytest.fail(
            f"{package} must not import {', '.join(allowed)}:\n"
            + "\n".join(f"  {v}" for v in violations),
            pytrace=False,
        )


_VIOLATING_SOURCES = {
    "plain import": "import naga_core\n",
    "submodule import": "import os\nimport naga_core.ledger as ledger\n",
    "from import": "from naga_core.ledger import Ledger\n",
    "from package import": "from naga_core import ledger\n",
    "inside a function": "def f():\n    from naga_core import x\n    return x\n",
    "type checking only": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import naga_core\n"
    ),
    "importlib": "import importlib\nimportlib.import_module('naga_core.ledger')\n",
    "dunder import": "__import__('naga_core')\n",
}


@pytest.mark.parametrize("source", _VIOLATING_SOURCES.values(), ids=_VIOLATING_SOURCES.keys())
def test_checker_reports_violations(source: str) -> None:
    violations = find_forbidden_imports(source, "naga_gateway/example.py", {"naga_core"})
    assert len(violations) == 1
    (violation,) = violations
    assert violation.module.startswith("naga_core")
    assert violation.line == source[: source.index("naga_core")].count("\n") + 1
    assert str(violation).startswith(f"naga_gateway/example.py:{violation.line}: imports ")


_ALLOWED_SOURCES = {
    "contracts": "from naga.v1 import ledger_pb2\nimport naga.constants\n",
    "similar name": "import naga_core_extras\nfrom naga_corex import y\n",
    "relative import": "from . import naga_core\nfrom .naga_core import z\n",
    "string mention": "NAME = 'naga_core'\n",
}


@pytest.mark.parametrize("source", _ALLOWED_SOURCES.values(), ids=_ALLOWED_SOURCES.keys())
def test_checker_accepts_allowed_imports(source: str) -> None:
    assert find_forbidden_imports(source, "naga_gateway/example.py", {"naga_core"}) == []
