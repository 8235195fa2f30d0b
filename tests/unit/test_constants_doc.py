"""docs/design/constants.md and naga/constants.py say the same thing.

The doc is where a reader learns why a number is what it is; it is only
worth reading if it cannot silently drift from the code. The table format is
described at the top of the doc.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import naga.constants

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "design" / "constants.md"

_PUBLIC_CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")
_FIRST_CODE_SPAN = re.compile(r"`([^`]+)`")
_SIZE = re.compile(r"\b(\d+) (KiB|MiB|GiB)\b")
_UNIT = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


@dataclass(frozen=True)
class DocRow:
    line: int
    name: str
    value: object
    size_bytes: int | None
    why: str


class DocFormatError(Exception):
    pass


def parse_constants_table(markdown: str) -> dict[str, DocRow]:
    """The rows of every table whose first cell is an UPPER_CASE name."""
    rows: dict[str, DocRow] = {}
    for line_number, line in enumerate(markdown.splitlines(), start=1):
        if not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name = cells[0].strip("`")
        if not _PUBLIC_CONSTANT.fullmatch(name):
            continue  # the header and separator rows
        where = f"constants.md:{line_number} ({name})"
        if len(cells) != 3:
            raise DocFormatError(f"{where}: expected 3 cells (name, value, why), got {len(cells)}")
        _, value_cell, why = cells
        literal = _FIRST_CODE_SPAN.search(value_cell)
        if literal is None:
            raise DocFormatError(f"{where}: value cell has no `literal`: {value_cell!r}")
        try:
            value: object = ast.literal_eval(literal.group(1))
        except (ValueError, SyntaxError) as error:
            raise DocFormatError(f"{where}: {literal.group(1)!r} is not a literal") from error
        size = _SIZE.search(value_cell)
        size_bytes = int(size.group(1)) * _UNIT[size.group(2)] if size else None
        if name in rows:
            raise DocFormatError(f"{where}: listed twice (first on line {rows[name].line})")
        rows[name] = DocRow(line_number, name, value, size_bytes, why)
    return rows


def public_constants() -> dict[str, object]:
    return {
        name: value
        for name, value in vars(naga.constants).items()
        if _PUBLIC_CONSTANT.fullmatch(name)
    }


def value_mismatches(code: dict[str, object], doc: dict[str, DocRow]) -> list[str]:
    problems: list[str] = []
    for name in sorted(code.keys() & doc.keys()):
        actual, row = code[name], doc[name]
        # Types too: 1 == 1.0 == True, but a float where the code has an int
        # (or bytes where it has a str) is a different contract.
        if type(row.value) is not type(actual) or row.value != actual:
            problems.append(f"{name}: doc says {row.value!r}, code has {actual!r}")
        elif row.size_bytes is not None and row.size_bytes != actual:
            problems.append(f"{name}: doc's size is {row.size_bytes} bytes, code has {actual!r}")
        if not row.why:
            problems.append(f"{name}: no reason given")
    return problems


@pytest.fixture(scope="module")
def doc_rows() -> dict[str, DocRow]:
    return parse_constants_table(DOC.read_text(encoding="utf-8"))


def test_constants_module_has_public_constants() -> None:
    # Guards the tests below against passing vacuously.
    assert len(public_constants()) >= 10


def test_every_constant_is_documented(doc_rows: dict[str, DocRow]) -> None:
    missing = sorted(public_constants().keys() - doc_rows.keys())
    assert not missing, f"add rows to docs/design/constants.md for: {', '.join(missing)}"


def test_doc_lists_only_existing_constants(doc_rows: dict[str, DocRow]) -> None:
    unknown = sorted(doc_rows.keys() - public_constants().keys())
    listed = ", ".join(unknown)
    assert not unknown, f"docs/design/constants.md lists names naga.constants lacks: {listed}"


def test_documented_values_match_the_code(doc_rows: dict[str, DocRow]) -> None:
    problems = "\n".join(value_mismatches(public_constants(), doc_rows))
    assert not problems, f"docs/design/constants.md disagrees with naga/constants.py:\n{problems}"


_SYNTHETIC_DOC = """
| Constant | Value | Why |
|---|---|---|
| `SIZE` | `1048576` (1 MiB, `1 << 20`) | because |
| `MAGIC` | `b"AB"` | because |
| `POLICY` | `"x"` | because |
| `TIMEOUT` | `0.0` | because |
"""


def test_checker_accepts_a_matching_doc() -> None:
    rows = parse_constants_table(_SYNTHETIC_DOC)
    code: dict[str, object] = {"SIZE": 1 << 20, "MAGIC": b"AB", "POLICY": "x", "TIMEOUT": 0.0}
    assert rows.keys() == code.keys()
    assert value_mismatches(code, rows) == []


@pytest.mark.parametrize(
    ("name", "code_value"),
    [
        ("SIZE", 2 << 20),  # different integer
        ("SIZE", 1048576.0),  # same number, different type
        ("MAGIC", "AB"),  # str where the doc has bytes
        ("POLICY", "y"),
        ("TIMEOUT", 0),
    ],
)
def test_checker_reports_a_wrong_value(name: str, code_value: object) -> None:
    code: dict[str, object] = {"SIZE": 1 << 20, "MAGIC": b"AB", "POLICY": "x", "TIMEOUT": 0.0}
    code[name] = code_value
    problems = value_mismatches(code, parse_constants_table(_SYNTHETIC_DOC))
    assert len(problems) == 1
    assert problems[0].startswith(f"{name}: ")


def test_checker_reports_a_wrong_human_size() -> None:
    rows = parse_constants_table("| `SIZE` | `1048576` (2 MiB) | because |\n")
    assert value_mismatches({"SIZE": 1 << 20}, rows) == [
        "SIZE: doc's size is 2097152 bytes, code has 1048576"
    ]


@pytest.mark.parametrize(
    "markdown",
    [
        "| `A` | 5 | no backticks around the value |\n",
        "| `A` | `five` | not a literal |\n",
        "| `A` | `1` | a | b |\n",
        "| `A` | `1` | x |\n| `A` | `1` | y |\n",
    ],
    ids=["no literal", "not a literal", "extra cell", "duplicate"],
)
def test_checker_rejects_malformed_rows(markdown: str) -> None:
    with pytest.raises(DocFormatError, match=r"constants\.md:"):
        parse_constants_table(markdown)
