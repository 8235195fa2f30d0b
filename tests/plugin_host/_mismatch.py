"""A plugin whose code lacks a tool its manifest declares."""

from __future__ import annotations

from naga_plugins import Plugin

plugin = Plugin("mismatch")


@plugin.tool("mismatch.one")
def one() -> int:
    return 1


main = plugin.main
