"""Test tools ``risky.r0`` .. ``risky.r4``: one per risk level, each
answering its own name."""

from __future__ import annotations

from naga_plugins import Plugin

plugin = Plugin("risky")


def _tool(level: int) -> None:
    name = f"risky.r{level}"

    @plugin.tool(name)
    def _answer() -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
        return {"tool": name}


for _level in range(5):
    _tool(_level)

main = plugin.main
