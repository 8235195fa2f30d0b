"""naga_core._modules.package_dir: where a package the core launches lives,
found without running its code (the core never imports the plugins or the
gateway: tests/architecture/test_layering.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from naga_core._modules import PackageMissing, package_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_it_finds_a_subpackage_and_its_files() -> None:
    where = package_dir("naga_plugins.executor")
    assert where == str(REPO_ROOT / "naga_plugins" / "executor")
    assert os.path.isfile(os.path.join(where, "plugin.toml"))
    assert package_dir("naga_plugins") == str(REPO_ROOT / "naga_plugins")


@pytest.mark.parametrize(
    "name", ["no_such_package_here", "naga_plugins.no_such", "naga_plugins._call"]
)
def test_a_missing_package_is_named(name: str) -> None:
    with pytest.raises(PackageMissing, match=f"package {name} is not installed"):
        package_dir(name)


def test_it_runs_none_of_the_packages_code() -> None:
    probe = (
        "import sys\n"
        "from naga_core._modules import package_dir\n"
        "package_dir('naga_plugins.examples'); package_dir('naga_gateway')\n"
        "tops = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(tops & {'naga_plugins', 'naga_gateway'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"
