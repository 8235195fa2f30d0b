"""Byte-compile the repository's packages before a start-up measurement.

An installed core has bytecode (pip compiles at install); a source checkout
run with PYTHONDONTWRITEBYTECODE (as on the development box) compiles about
300 modules at every process start, 0.6 s of the core's CPU to readiness
(issue 13). The benches measure the installed case unless told not to, and
say which they measured."""

from __future__ import annotations

import compileall
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("naga", "naga_core", "naga_plugins", "sandbox")


def compile_sources() -> bool:
    """Write the missing or stale .pyc files; whether all compiled."""
    done = [compileall.compile_dir(os.path.join(REPO, p), quiet=1, workers=0) for p in PACKAGES]
    return all(done)
