"""The import checker behind tests/architecture/test_layering.py.

It reads sources with ``ast`` (nothing is imported, so a violation is found
even in code no test runs: a function body, an ``if TYPE_CHECKING:`` block)
and judges the import graph against these rules:

* ``package``: the allow-matrix of top-level packages (:data:`PACKAGES`).
* ``layer``: the layers inside the core (:data:`CORE_LAYERS`); a part of
  the core that no layer names is ``unplaced``, so a new subpackage must be
  placed before it can import anything.
* ``private``: a private module (or name) ``a.b._c`` may be imported only
  from inside ``a.b``; everyone else goes through ``a.b``'s ``__init__``.
* ``cycle``: no two modules import each other, directly or around a loop
  (a package's own ``__init__`` re-exporting its modules is not a cycle).
* ``alias``: a proto module of ``naga.v1`` is imported under its one alias
  (:data:`PROTO_ALIASES`), or as ``pb`` where it is the only one.
* ``style``: a package writes its value classes with ``dataclasses`` or
  with ``attrs`` (:data:`RECORD_STYLE`), not both.

The rules are data, so the self-tests feed the checker synthetic trees and
see it fail on each kind of violation.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Top-level package -> the first-party packages it may import (besides
#: itself). ``naga`` (contracts, SDK, shared names) is the bottom; the
#: sandbox launcher sits on it; the core, the gateway and the plugins sit on
#: top and never import each other: the core launches the others by module
#: name. The gateway and the plugins run inside the sandbox and need nothing
#: of the launcher.
PACKAGES: Mapping[str, frozenset[str]] = {
    "naga": frozenset(),
    "sandbox": frozenset({"naga"}),
    "naga_core": frozenset({"naga", "sandbox"}),
    "naga_gateway": frozenset({"naga"}),
    "naga_plugins": frozenset({"naga"}),
}

#: The parts of ``naga_core`` (a subpackage or a top-level module), lowest
#: first. A part may import the parts of lower layers only; parts of one
#: layer never import each other. docs/design/naming.md explains the order.
CORE_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors"}),
    frozenset({"ledger", "supervisor", "_modules", "_sdnotify", "_localmodel_assets", "egress"}),
    frozenset({"_home", "_localmodel"}),
    frozenset({"kernel", "_store", "_providers", "_units"}),
    frozenset({"authz", "workspace", "approvals", "memory", "skills", "constitution"}),
    frozenset({"plugins"}),
    frozenset({"agent"}),
    frozenset({"wechat", "scheduler"}),
    frozenset({"daemon", "replay"}),
    frozenset({"_doctor"}),
    frozenset({"cli"}),
)

#: The alias of each proto module (docs/design/naming.md).
PROTO_ALIASES: Mapping[str, str] = {
    "agent_pb2": "apb",
    "authz_pb2": "zpb",
    "console_pb2": "cnpb",
    "core_pb2": "cpb",
    "job_pb2": "jpb",
    "kernel_pb2": "kpb",
    "memory_pb2": "mmpb",
    "ledger_pb2": "lpb",
    "model_pb2": "mpb",
    "plugin_install_pb2": "ipb",
    "plugin_pb2": "ppb",
    "plugin_service_pb2": "spb",
    "replay_pb2": "rpb",
    "sandbox_pb2": "sbpb",
    "sealed_pb2": "slpb",
    "skills_pb2": "skpb",
    "snapshot_pb2": "snpb",
    "startparts_pb2": "sppb",
    "tools_pb2": "tlpb",
    "turn_pb2": "tpb",
    "wechat_pb2": "wpb",
}

_ALIAS_OWNERS = {alias: module for module, alias in PROTO_ALIASES.items()}

#: How each package writes value classes.
RECORD_STYLE: Mapping[str, str] = {
    "naga": "dataclasses",
    "sandbox": "dataclasses",
    "naga_core": "dataclasses",
    "naga_gateway": "attrs",
    "naga_plugins": "attrs",
}
_STYLES = frozenset({"dataclasses", "attrs", "attr"})

#: Calls that import the module named by their first (string) argument.
_DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


@dataclass(frozen=True, slots=True)
class Module:
    """One source file: its dotted name, whether it is a package's
    ``__init__``, and its text."""

    name: str
    source: str
    is_package: bool = False
    filename: str = ""

    @property
    def package(self) -> str:
        """The package the module's code runs in (itself for an ``__init__``)."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True, slots=True)
class Import:
    """``module`` (absolute) imported at ``line``; ``names`` are the names
    of a ``from module import ...`` (each may be a submodule)."""

    line: int
    module: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str  # package, layer, unplaced, private, cycle, alias, style
    filename: str
    line: int
    detail: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}: [{self.kind}] {self.detail}"


def imports_of(module: Module) -> list[Import]:
    """Every import in ``module``, relative ones resolved, in line order."""
    tree = ast.parse(module.source, filename=module.filename or module.name)
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module)
            if base is not None:
                found.append(Import(node.lineno, base, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if (
                name in _DYNAMIC_IMPORTERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.append(Import(node.lineno, node.args[0].value))
    return sorted(found, key=lambda i: (i.line, i.module))


def _resolve(module: Module, level: int, name: str | None) -> str | None:
    if level == 0:
        return name
    parts = module.package.split(".") if module.package else []
    if level - 1 > len(parts):
        return None  # beyond the top: an ImportError at run time
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, name] if name else parts) or None


def _top(name: str) -> str:
    return name.partition(".")[0]


def _core_part(name: str) -> str | None:
    """The part of the core ``name`` is in: ``naga_core.kernel._trust`` is in
    ``kernel``; ``naga_core`` itself is in none."""
    parts = name.split(".")
    return parts[1] if parts[0] == "naga_core" and len(parts) > 1 else None


def _layer_of(part: str) -> int | None:
    for number, layer in enumerate(CORE_LAYERS):
        if part in layer:
            return number
    return None


def _targets(imp: Import) -> list[str]:
    """The dotted names an import touches: the module, and each imported
    name under it (a submodule, or a name whose privacy counts too)."""
    return [imp.module, *(f"{imp.module}.{n}" for n in imp.names if n != "*")]


def _private_owner(name: str) -> str | None:
    """For ``a.b._c.d``, ``a.b``: the package a private part belongs to."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _within(package: str, owner: str) -> bool:
    return package == owner or package.startswith(owner + ".")


def check(modules: Iterable[Module]) -> list[Violation]:
    """Every violation of the rules in ``modules``."""
    tree = {m.name: m for m in modules}
    first_party = {_top(name) for name in tree} | set(PACKAGES)
    violations: list[Violation] = []
    edges: dict[str, dict[str, int]] = {name: {} for name in tree}
    for module in tree.values():
        where = module.filename or module.name
        for imp in imports_of(module):
            for target in _targets(imp):
                violations.extend(_judge(module, where, imp.line, target, first_party))
                if target in tree and target != module.name:
                    edges[module.name].setdefault(target, imp.line)
    violations.extend(_cycles(tree, edges))
    for module in tree.values():
        violations.extend(_naming(module))
    # One import can break a rule once per imported name: report it once.
    unique: dict[tuple[str, str, int], Violation] = {}
    for v in violations:
        unique.setdefault((v.kind, v.filename, v.line), v)
    return sorted(unique.values(), key=lambda v: (v.filename, v.line, v.kind, v.detail))


def _judge(
    module: Module, where: str, line: int, target: str, first_party: set[str]
) -> list[Violation]:
    found: list[Violation] = []
    src_top, dst_top = _top(module.name), _top(target)
    if dst_top in first_party and dst_top != src_top:
        allowed = PACKAGES.get(src_top, frozenset())
        if dst_top not in allowed:
            found.append(
                Violation("package", where, line, f"{src_top} imports {target} ({dst_top})")
            )
    if src_top == dst_top == "naga_core":
        found.extend(_judge_core(module, where, line, target))
    owner = _private_owner(target)
    if owner is not None and dst_top in first_party and not _within(module.package, owner):
        found.append(Violation("private", where, line, f"imports {target}, private to {owner}"))
    return found


def _judge_core(module: Module, where: str, line: int, target: str) -> list[Violation]:
    src, dst = _core_part(module.name), _core_part(target)
    if src is None or dst is None or src == dst:
        return []
    src_layer, dst_layer = _layer_of(src), _layer_of(dst)
    if src_layer is None or dst_layer is None:
        part = src if src_layer is None else dst
        return [Violation("unplaced", where, line, f"naga_core.{part} is in no layer")]
    if dst_layer >= src_layer:
        return [
            Violation(
                "layer",
                where,
                line,
                f"naga_core.{src} (layer {src_layer}) imports {target} "
                f"(naga_core.{dst}, layer {dst_layer})",
            )
        ]
    return []


def _cycles(tree: Mapping[str, Module], edges: Mapping[str, Mapping[str, int]]) -> list[Violation]:
    """Strongly connected groups of plain modules (edges into a package's
    ``__init__`` left out: that it re-exports its own modules is no cycle)."""
    graph = {
        name: [t for t in targets if not tree[t].is_package]
        for name, targets in edges.items()
        if not tree[name].is_package
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[Violation] = []

    def visit(root: str) -> None:
        # Iterative Tarjan: a deep tree must not hit the recursion limit.
        work: list[tuple[str, int]] = [(root, 0)]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, i = work[-1]
            targets = graph[node]
            if i < len(targets):
                work[-1] = (node, i + 1)
                nxt = targets[i]
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(_cycle_violation(sorted(group), tree, edges))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def _cycle_violation(
    group: list[str], tree: Mapping[str, Module], edges: Mapping[str, Mapping[str, int]]
) -> Violation:
    first = group[0]
    members = set(group)
    line = min(line for t, line in edges[first].items() if t in members)
    where = tree[first].filename or first
    return Violation("cycle", where, line, "import cycle: " + " <-> ".join(group))


def _naming(module: Module) -> list[Violation]:
    """Proto aliases and the package's record style (not of generated code)."""
    if module.name.startswith("naga.v1."):
        return []
    where = module.filename or module.name
    tree = ast.parse(module.source, filename=where)
    protos: list[tuple[int, str, str | None]] = []
    found: list[Violation] = []
    style = RECORD_STYLE.get(_top(module.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "naga.v1":
            protos.extend((node.lineno, a.name, a.asname) for a in node.names)
        modules: list[tuple[int, str]] = []
        if isinstance(node, ast.Import):
            modules = [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [(node.lineno, node.module)]
        for line, name in modules:
            top = _top(name)
            family = "dataclasses" if top == "dataclasses" else "attrs"
            if style is not None and top in _STYLES and family != style:
                found.append(
                    Violation("style", where, line, f"imports {top}; this package uses {style}")
                )
    for line, name, alias in protos:
        wanted = PROTO_ALIASES.get(name)
        if alias is None or alias == wanted or (alias == "pb" and len(protos) == 1):
            continue
        if alias == "pb":
            detail = f"{name} imported as pb beside other proto modules"
        elif wanted is not None:
            detail = f"{name} imported as {alias}; its alias is {wanted}"
        elif alias in _ALIAS_OWNERS:
            detail = f"{name} imported as {alias}, the alias of {_ALIAS_OWNERS[alias]}"
        else:
            continue  # a new proto module: list its alias in PROTO_ALIASES
        found.append(Violation("alias", where, line, detail))
    return found


def load_tree(root: Path = REPO_ROOT, packages: Iterable[str] = PACKAGES) -> list[Module]:
    """The first-party sources under ``root`` (generated code included: it
    imports too)."""
    modules: list[Module] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(root)
            parts = list(rel.with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            modules.append(
                Module(
                    ".".join(parts),
                    path.read_text(encoding="utf-8"),
                    is_package=is_package,
                    filename=rel.as_posix(),
                )
            )
    return modules


def find_forbidden_imports(source: str, filename: str, forbidden: Iterable[str]) -> list[Import]:
    """Imports in ``source`` of any module in (or under) a ``forbidden``
    top-level package (for rules about third-party packages: authz pulls
    in no grpc)."""
    banned = set(forbidden)
    module = Module(Path(filename).stem, source, filename=filename)
    return [imp for imp in imports_of(module) if _top(imp.module) in banned]
