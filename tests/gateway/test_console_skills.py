"""The console's skills view (skills17; docs/adr/0044-console-skills-view.md),
in real headless Chromium against a real ``naga daemon start`` (its sandboxed
gateway): a skill imported with ``naga skill import`` is listed, its SKILL.md
body renders as Markdown (sanitized, without its frontmatter), its files and
its history (every version, newest first) are the CLI's; a guest is refused
by the gateway, and a forged owner login by the core itself."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from naga_core.cli import main as cli_main
from tests.agent.conftest import ServerThread, model_server
from tests.gateway import _console as c

__all__ = ["model_server"]  # the fixture, used by name

pytestmark = pytest.mark.slow

SKILL = """---
name: csv-totals
description: Sum a column of a CSV file; use when asked for a total of a CSV column.
---
# CSV totals

## Steps

1. Read the header to find the **column**.
2. Run `scripts/total.sh FILE COLUMN`.

<script>window.skillScriptRan = true</script>
<img src="x" alt="a picture" onerror="window.skillImgRan = true">
"""
SCRIPT = "#!/bin/sh\nawk -F, 'NR>1{s+=$2} END{print s}' \"$1\"\n"


@pytest.fixture(scope="module")
def core(
    tmp_path_factory: pytest.TempPathFactory, model_server: ServerThread
) -> Iterator[c.RealCore]:
    with c.real_core(tmp_path_factory.mktemp("console-skills"), model_server) as core:
        yield core


def _cli(capsys: pytest.CaptureFixture[str], home: str, *args: str) -> Any:
    capsys.readouterr()
    assert cli_main([*args, "--home", home, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _import(capsys: pytest.CaptureFixture[str], home: str, src: Path, body: str) -> Any:
    (src / "scripts").mkdir(parents=True, exist_ok=True)
    (src / "SKILL.md").write_text(body)
    (src / "scripts" / "total.sh").write_text(SCRIPT)
    os.chmod(src / "scripts" / "total.sh", 0o755)
    return _cli(capsys, home, "skill", "import", str(src))


def _history(d: Any) -> list[list[str]]:
    rows = c.js(
        d,
        "return [...document.querySelectorAll('#skill-history tbody tr')]"
        ".map((r) => [...r.cells].map((x) => x.textContent))",
    )
    return [list(r) for r in rows]


def _open(d: Any, port: int, home: str) -> None:
    c.open_console(d, port, "/#s=main", home=home)
    c.show_page(d, "skills")
    c.wait(d, "the skill's row", lambda _: c.texts(d, "#skills-list button.skill-open"))
    d.find_element("css selector", '#skills-list button[data-skill="csv-totals"]').click()
    c.wait(
        d,
        "the skill's detail",
        lambda _: c.js(d, "return !!document.querySelector('#skill-detail[data-ready]')"),
    )


def test_an_imported_skill_is_listed_rendered_and_its_history_shown(
    core: c.RealCore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _import(capsys, core.home, tmp_path / "csv-totals", SKILL)
    assert first["action"] == "created"
    second = _import(
        capsys,
        core.home,
        tmp_path / "csv-totals",
        SKILL.replace("## Steps", "## Steps\n\n0. Check for empty cells."),
    )
    assert second["action"] == "patched"
    log = _cli(capsys, core.home, "skill", "log", "csv-totals")["versions"]
    assert len(log) == 2
    for name, size in c.SIZES.items():
        with c.browser(size) as d:
            _open(d, core.port, core.home)
            listed = c.texts(d, "#skills-list tbody tr")
            assert any(
                "csv-totals" in row and "Sum a column of a CSV file" in row for row in listed
            ), listed
            assert (
                c.js(d, "return document.getElementById('skill-title').textContent") == "csv-totals"
            )
            # The body as Markdown: headings, a list, bold, code; no frontmatter.
            assert c.texts(d, "#skill-body h2") == ["Steps"]
            assert c.texts(d, "#skill-body strong") == ["column"]
            assert "scripts/total.sh FILE COLUMN" in c.texts(d, "#skill-body code")
            assert len(c.texts(d, "#skill-body ol li")) >= 2
            text = str(c.js(d, "return document.getElementById('skill-body').textContent"))
            assert "description:" not in text
            assert "Check for empty cells." in text
            # Sanitized: neither the script nor the handler ran or stayed.
            assert (
                c.js(
                    d,
                    "return document.querySelectorAll("
                    "'#skill-body script, #skill-body [onerror]').length",
                )
                == 0
            )
            assert c.js(d, "return !!(window.skillScriptRan || window.skillImgRan)") is False
            files = c.texts(d, "#skill-files summary")
            assert files == [f"scripts/total.sh {len(SCRIPT)} bytes, executable"], files
            history = _history(d)
            assert [row[0] for row in history] == [v["version"][:12] for v in log]
            assert [row[1] for row in history] == ["patch", "create"]
            assert all(row[2] == "owner" for row in history), history
            assert "2 versions" in str(
                c.js(d, "return document.getElementById('skill-meta').textContent")
            )
            c.shoot(d, tmp_path, f"skills-{name}")
            assert c.overflowing(d) == [], name
            assert [v for v in c.axe(d) if v["impact"] == "critical"] == [], name
