"""The fast tier (``make test-fast``, ``pytest --fast``: tests/conftest.py)
skips slow tests and caps every hypothesis test's examples, its own
``@settings`` and a state machine's included; without ``--fast`` both run
as written. Checked on a synthetic test file run in a fresh pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import FAST_EXAMPLES, FAST_STEPS

REPO_ROOT = Path(__file__).resolve().parents[2]

_SYNTHETIC = """
import os
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

LOG = os.environ["TIER_LOG"]


def note(word):
    with open(LOG, "a") as f:
        f.write(word + "\\n")


@settings(max_examples=200, database=None)
@given(st.integers())
def test_explicit(n):
    note("explicit")


@given(st.integers())
def test_profile(n):
    note("profile")


class TestInAClass:
    @settings(max_examples=150, database=None)
    @given(st.text())
    def test_method(self, s):
        note("method")


class Machine(RuleBasedStateMachine):
    @rule()
    def step(self):
        note("step")


Machine.TestCase.settings = settings(max_examples=50, stateful_step_count=30, database=None)
TestMachine = Machine.TestCase


@pytest.mark.slow
def test_slow():
    note("slow")
"""


def _run(tmp_path: Path, *args: str) -> dict[str, int]:
    test_file = tmp_path / "test_synthetic.py"
    test_file.write_text(_SYNTHETIC)
    log = tmp_path / "log"
    log.write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", *args, "-q", str(test_file)],
        cwd=REPO_ROOT,
        env={**_env(), "TIER_LOG": str(log)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    counts: dict[str, int] = {}
    for word in log.read_text().split():
        counts[word] = counts.get(word, 0) + 1
    return counts


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


def test_the_fast_tier_caps_examples_and_skips_slow_tests(tmp_path: Path) -> None:
    counts = _run(tmp_path, "--fast")
    assert "slow" not in counts
    for word in ("explicit", "profile", "method"):
        assert 1 <= counts[word] <= FAST_EXAMPLES, counts
    assert 1 <= counts["step"] <= FAST_EXAMPLES * FAST_STEPS, counts


def test_the_full_tier_runs_as_written(tmp_path: Path) -> None:
    counts = _run(tmp_path)
    assert counts["slow"] == 1
    assert counts["explicit"] > FAST_EXAMPLES
    assert counts["method"] > FAST_EXAMPLES
    assert counts["step"] > FAST_EXAMPLES * FAST_STEPS


def test_every_shared_file_exists_and_runs_in_its_group() -> None:
    from tests.conftest import SHARED, _FileOrGroup  # pyright: ignore[reportPrivateUsage]

    split = _FileOrGroup._split_scope  # pyright: ignore[reportPrivateUsage]
    for group, paths in SHARED.items():
        for path in paths:
            assert (REPO_ROOT / path).is_file(), f"{path} (group {group}) is gone"
            assert split(None, f"{path}::test_x") == group  # pyright: ignore[reportArgumentType]
    assert split(None, "tests/unit/test_x.py::T::test_y") == "tests/unit/test_x.py"  # pyright: ignore[reportArgumentType]
