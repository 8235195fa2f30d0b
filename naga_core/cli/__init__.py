"""The ``naga`` command line. Every reporting command takes ``--json``."""

from __future__ import annotations

from naga_core.cli._main import main

__all__ = ["main"]
