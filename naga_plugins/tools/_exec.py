"""The target a shell command's sandbox starts: it becomes the command.

``sandbox.launch(Profile.shell(...), "naga_plugins.tools._exec:main",
argv)``: every layer is in place when this runs, and ``execv`` keeps them
(no_new_privs, the filter, the view, the limits are inherited)."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def main(argv: list[str]) -> NoReturn:
    if not argv:
        sys.exit(64)
    os.execv(argv[0], argv)


__all__ = ["main"]
