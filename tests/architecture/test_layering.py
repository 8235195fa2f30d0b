"""Import layering (SPEC sections 1 and 2, docs/design/naming.md): the
allow-matrix of top-level packages, the layers inside the core, private
modules and cycles, checked on the tree, and the checker's own self-test
on synthetic trees (one per kind of violation, and the look-alikes it must
let pass).

Only naga-core is privileged. The gateway and the plugins run in other,
sandboxed processes, so importing ``naga_core`` from them would drag
privileged code into a sandbox or hide a cross-process call behind a
function call; the core importing them would hide a process boundary the
other way. They meet in ``naga``: the contracts, the SDK and every name
they share.
"""

from __future__ import annotations

import pytest

from tests.architecture.imports import (
    CORE_LAYERS,
    PACKAGES,
    Module,
    Violation,
    check,
    find_forbidden_imports,
    load_tree,
)

__all__ = ["find_forbidden_imports"]


@pytest.fixture(scope="module")
def tree() -> list[Module]:
    return load_tree()


def test_the_tree_has_every_package(tree: list[Module]) -> None:
    # An empty tree would make every rule pass vacuously after a rename.
    tops = {m.name.partition(".")[0] for m in tree}
    assert tops == set(PACKAGES)
    assert len(tree) > 200


def test_every_part_of_the_core_is_in_a_layer(tree: list[Module]) -> None:
    parts = {m.name.split(".")[1] for m in tree if m.name.startswith("naga_core.")}
    placed: set[str] = set[str]().union(*CORE_LAYERS)
    assert parts - {"__main__"} <= placed, f"place these in CORE_LAYERS: {parts - placed}"
    assert placed <= parts, f"CORE_LAYERS names parts that are gone: {placed - parts}"


@pytest.mark.parametrize(
    "kind", ["package", "layer", "unplaced", "private", "cycle", "alias", "style"]
)
def test_the_tree_respects(tree: list[Module], kind: str) -> None:
    found = [v for v in check(tree) if v.kind == kind]
    if found:
        pytest.fail(f"{kind} violations:\n" + "\n".join(f"  {v}" for v in found), pytrace=False)


# --- the checker's self-test ------------------------------------------------------


def _mods(sources: dict[str, str]) -> list[Module]:
    """``{"pkg/mod.py": source}`` as modules; missing ``__init__``s are
    added empty, as a real tree would have them."""
    out: dict[str, Module] = {}
    for path, source in sources.items():
        parts = path.removesuffix(".py").split("/")
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = Module(".".join(parts), source, is_package, path)
        for i in range(1, len(parts)):
            name = ".".join(parts[:i])
            out.setdefault(name, Module(name, "", True, "/".join(parts[:i]) + "/__init__.py"))
    return list(out.values())


def _only(sources: dict[str, str]) -> Violation:
    found = check(_mods(sources))
    assert len(found) == 1, found
    return found[0]


_PACKAGE_VIOLATIONS = {
    "gateway imports the core": ("naga_gateway/x.py", "import naga_core\n", 1),
    "plugin imports the core, submodule": (
        "naga_plugins/x.py",
        "import os\nimport naga_core.ledger as ledger\n",
        2,
    ),
    "sandbox imports the core, from": ("sandbox/x.py", "from naga_core.ledger import L\n", 1),
    "core imports a plugin": ("naga_core/x.py", "from naga_plugins import executor\n", 1),
    "core imports the gateway": ("naga_core/cli/c.py", "from naga_gateway.client import C\n", 1),
    "gateway imports the sandbox": ("naga_gateway/x.py", "from sandbox import TOKEN_ENV\n", 1),
    "plugins import the gateway": ("naga_plugins/x.py", "import naga_gateway\n", 1),
    "contracts import the sandbox": ("naga/x.py", "import sandbox\n", 1),
    "inside a function": (
        "naga_gateway/x.py",
        "def f():\n    from naga_core import x\n    return x\n",
        2,
    ),
    "type checking only": (
        "naga_gateway/x.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import naga_core\n",
        3,
    ),
    "importlib": (
        "naga_gateway/x.py",
        "import importlib\nimportlib.import_module('naga_core.ledger')\n",
        2,
    ),
    "dunder import": ("naga_plugins/x.py", "__import__('naga_core')\n", 1),
}


@pytest.mark.parametrize(
    ("path", "source", "line"), _PACKAGE_VIOLATIONS.values(), ids=_PACKAGE_VIOLATIONS.keys()
)
def test_checker_refuses_a_package_import(path: str, source: str, line: int) -> None:
    v = _only({path: source})
    assert (v.kind, v.filename, v.line) == ("package", path, line)
    assert str(v).startswith(f"{path}:{line}: [package] ")


_LAYER_VIOLATIONS = {
    "ledger imports the kernel": ("naga_core/ledger/_x.py", "from naga_core.kernel import K\n"),
    "kernel imports authz": ("naga_core/kernel/_x.py", "from naga_core import authz\n"),
    "authz imports the agent": ("naga_core/authz/_x.py", "import naga_core.agent\n"),
    "agent imports the daemon": ("naga_core/agent/_x.py", "from naga_core.daemon import D\n"),
    "daemon imports the cli": ("naga_core/daemon/_x.py", "from naga_core.cli import main\n"),
    "same layer": ("naga_core/daemon/_x.py", "from naga_core.replay import replay\n"),
    "relative, upwards": ("naga_core/kernel/_x.py", "from ..authz import A\n"),
    "a top-level module upwards": ("naga_core/_home.py", "from naga_core.kernel import K\n"),
}


@pytest.mark.parametrize(("path", "source"), _LAYER_VIOLATIONS.values(), ids=_LAYER_VIOLATIONS)
def test_checker_refuses_an_upward_core_import(path: str, source: str) -> None:
    v = _only({path: source})
    assert (v.kind, v.filename, v.line) == ("layer", path, 1)


def test_checker_refuses_an_unplaced_core_part() -> None:
    v = _only({"naga_core/brandnew/_x.py": "from naga_core.ledger import L\n"})
    assert v.kind == "unplaced"
    assert "naga_core.brandnew" in v.detail


_PRIVATE_VIOLATIONS = {
    "another subpackage's module": (
        "naga_core/cli/_x.py",
        "from naga_core.ledger._fs import RealFs\n",
    ),
    "a private module by from-import": (
        "naga_core/cli/_x.py",
        "from naga_core.ledger import _fs\n",
    ),
    "a private name": ("naga_core/cli/_x.py", "from naga_core.ledger import _helper\n"),
    "a parent reaching down": (
        "naga_core/_home.py",
        "from naga_core.ledger._checkpoint import C\n",
    ),
    "a sibling's private module": (
        "naga/sdk/_x.py",
        "from naga.tokens._token import Token\n",
    ),
    "plain import": ("naga_gateway/x.py", "import naga.plugin._frames\n"),
}


@pytest.mark.parametrize(
    ("path", "source"), _PRIVATE_VIOLATIONS.values(), ids=_PRIVATE_VIOLATIONS.keys()
)
def test_checker_refuses_another_packages_private_module(path: str, source: str) -> None:
    v = _only({path: source})
    assert (v.kind, v.filename, v.line) == ("private", path, 1)


def test_checker_refuses_a_cycle() -> None:
    v = _only(
        {
            "naga_core/kernel/_a.py": "from naga_core.kernel._b import B\n",
            "naga_core/kernel/_b.py": (
                "import os\n\ndef f():\n    from naga_core.kernel._a import A\n"
            ),
        }
    )
    assert (v.kind, v.filename, v.line) == ("cycle", "naga_core/kernel/_a.py", 1)
    assert "naga_core.kernel._a <-> naga_core.kernel._b" in v.detail


def test_checker_refuses_a_longer_cycle_once() -> None:
    v = _only(
        {
            "naga/sdk/_a.py": "from naga.sdk import _b\n",
            "naga/sdk/_b.py": "from naga.sdk._c import C\n",
            "naga/sdk/_c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from naga.sdk._a import A\n",
        }
    )
    assert v.kind == "cycle"
    assert v.detail.endswith("naga.sdk._a <-> naga.sdk._b <-> naga.sdk._c")


_NAMING_VIOLATIONS = {
    "another module's alias": (
        "naga_core/x.py",
        "from naga.v1 import authz_pb2 as apb\n",
        "alias",
    ),
    "an alias of its own": ("naga/sdk/_x.py", "from naga.v1 import agent_pb2 as agpb\n", "alias"),
    "pb beside another": (
        "naga_gateway/x.py",
        "from naga.v1 import core_pb2 as cpb\nfrom naga.v1 import kernel_pb2 as pb\n",
        "alias",
    ),
    "a new module taking a used alias": (
        "naga_core/x.py",
        "from naga.v1 import brandnew_pb2 as kpb\n",
        "alias",
    ),
    "attrs in the core": ("naga_core/kernel/_x.py", "import attrs\n", "style"),
    "attr in the contracts": ("naga/x.py", "from attr import frozen\n", "style"),
    "dataclasses in the gateway": (
        "naga_gateway/x.py",
        "from dataclasses import dataclass\n",
        "style",
    ),
}


@pytest.mark.parametrize(
    ("path", "source", "kind"), _NAMING_VIOLATIONS.values(), ids=_NAMING_VIOLATIONS.keys()
)
def test_checker_refuses_a_naming_violation(path: str, source: str, kind: str) -> None:
    v = _only({path: source})
    assert (v.kind, v.filename) == (kind, path)
    assert v.line == source.count("\n")


_ALLOWED = {
    "contracts": {"naga_gateway/x.py": "from naga.v1 import ledger_pb2\nimport naga.constants\n"},
    "sandbox from the core": {"naga_core/agent/_x.py": "from sandbox import Profile\n"},
    "similar names": {"naga_gateway/x.py": "import naga_core_extras\nfrom naga_corex import y\n"},
    "string mention": {"naga_gateway/x.py": "NAME = 'naga_core'\nTARGET = 'naga_gateway:main'\n"},
    "downwards in the core": {
        "naga_core/cli/_x.py": "from naga_core.daemon import serve\nfrom naga_core import ledger\n",
        "naga_core/daemon/_y.py": "from naga_core.agent import Agent\nimport naga_core.kernel\n",
        "naga_core/_doctor.py": "from naga_core._home import Home\n",
    },
    "own private modules": {
        "naga_core/kernel/__init__.py": "from naga_core.kernel._trust import T\n",
        "naga_core/kernel/_trust.py": "from naga_core.kernel._state import S\nfrom . import _x\n",
        "naga_core/kernel/_state.py": "",
        "naga_core/kernel/_x.py": "",
    },
    "an ancestor's private module": {"naga_core/cli/_x.py": "from naga_core._home import Home\n"},
    "third-party private names": {"naga_core/_x.py": "from google.protobuf import _upb\n"},
    "proto aliases": {
        "naga_core/_x.py": "from naga.v1 import agent_pb2 as apb\nfrom naga.v1 import turn_pb2\n",
        "naga_core/_y.py": "from naga.v1 import plugin_pb2 as pb\n",
        "naga_core/_z.py": "from naga.v1 import brandnew_pb2 as bnpb\nimport dataclasses\n",
        "naga_gateway/_w.py": "import attrs\n",
    },
    "a package re-exporting its modules": {
        "naga/sdk/__init__.py": "from naga.sdk._client import Client\n",
        "naga/sdk/_client.py": "from naga.sdk import errors\n",
        "naga/sdk/errors.py": "",
    },
}


@pytest.mark.parametrize("sources", _ALLOWED.values(), ids=_ALLOWED.keys())
def test_checker_accepts_allowed_imports(sources: dict[str, str]) -> None:
    assert check(_mods(sources)) == []


def test_forbidden_imports_finds_third_party_packages() -> None:
    found = find_forbidden_imports(
        "import os\nimport grpc.aio\nfrom grpc import x\n", "m.py", {"grpc"}
    )
    assert [(i.line, i.module) for i in found] == [(2, "grpc.aio"), (3, "grpc")]
