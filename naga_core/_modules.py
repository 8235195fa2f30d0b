"""Where another package's code lives, found by name without importing it.

The core never imports the gateway or the plugins (docs/design/naming.md,
tests/architecture/test_layering.py): it launches them by module name, and
where it needs their files (a manifest, the shipped plugins) it asks the
import system where the package is, which runs none of its code.
"""

from __future__ import annotations

import importlib.util
import os

from naga_core.errors import NagaError


class PackageMissing(NagaError):
    """A package the core launches is not installed."""


def package_dir(dotted: str) -> str:
    """The directory of package ``dotted`` (``naga_plugins.executor``).

    Only the top-level package is looked up: ``find_spec`` of a dotted name
    would import its parents.
    """
    top, _, rest = dotted.partition(".")
    spec = importlib.util.find_spec(top)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = os.path.join(os.path.abspath(location), *rest.split(".")) if rest else location
        if os.path.isfile(os.path.join(path, "__init__.py")):
            return os.path.abspath(path)
    raise PackageMissing(f"package {dotted} is not installed (looked in {locations or 'nowhere'})")


__all__ = ["PackageMissing", "package_dir"]
