"""``bulk.text``: ``size`` bytes of numbered lines (so a piece read back
can be told apart from another)."""

from __future__ import annotations

from naga_plugins import Plugin

plugin = Plugin("bulk")


@plugin.tool("bulk.text")
def text(size: int) -> dict[str, str]:
    lines: list[str] = []
    total = 0
    n = 0
    while total < size:
        line = f"line {n:07d} of the bulk text\n"
        lines.append(line)
        total += len(line)
        n += 1
    return {"text": "".join(lines)[:size]}


main = plugin.main
