"""How commands report: one JSON object with ``--json``, lines otherwise."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Outcome:
    """What a command found: an exit code, a JSON-able object, human lines."""

    code: int
    data: dict[str, Any]
    lines: list[str] = field(default_factory=lambda: [])

    def emit(self, as_json: bool) -> int:
        if as_json:
            sys.stdout.write(json.dumps(self.data, indent=2, sort_keys=True) + "\n")
        else:
            for line in self.lines:
                sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return self.code


class Progress:
    """A single self-overwriting progress line on stderr for long work."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._tty = sys.stderr.isatty()
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        pct = 100 * done // total if total else 100
        end = "\r" if self._tty and done < total else "\n"
        if self._tty or done >= total or not self._shown:
            sys.stderr.write(f"{self._label}: {done}/{total} ({pct}%)" + end)
            sys.stderr.flush()
            self._shown = True
