"""scripts/local_model.py, the step ``make`` runs: it says what is missing and
what to do, with distinct exit codes, before any long build or download."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "local_model.py"


def _run(*args: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": path, "HOME": "/nonexistent"},
    )


def test_check_on_an_empty_cache_names_both_missing_pieces(tmp_path: Path) -> None:
    result = _run("--cache", str(tmp_path), "check")
    assert result.returncode == 1
    assert "no llama-cpp-python 0.3.36 wheel built with Naga's flags" in result.stdout
    assert "is not at" in result.stdout
    assert result.stdout.count("run `make`") == 2


def test_a_damaged_model_fails_the_check(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf").write_bytes(b"GGUF")
    result = _run("--cache", str(tmp_path), "check")
    assert result.returncode == 1
    assert "has 4 bytes" in result.stdout


def test_build_wheel_without_compilers_says_what_to_install(tmp_path: Path) -> None:
    result = _run("--cache", str(tmp_path), "build-wheel", path=str(tmp_path))
    assert result.returncode == 2
    assert "gcc, g++ not found on PATH" in result.stdout
    assert "apt-get install build-essential cmake" in result.stdout
    assert not (tmp_path / "wheels").exists() or not any((tmp_path / "wheels").iterdir())


def test_wheel_dir_is_inside_the_cache(tmp_path: Path) -> None:
    result = _run("--cache", str(tmp_path), "wheel-dir")
    assert result.returncode == 0
    assert result.stdout.strip() == str(tmp_path / "wheels")


def test_the_local_extra_pins_the_version_the_script_builds() -> None:
    import tomllib

    from naga_core._localmodel_assets import LLAMA_CPP_PYTHON_VERSION

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert f"llama-cpp-python[server]=={LLAMA_CPP_PYTHON_VERSION}" in extras["local"]
