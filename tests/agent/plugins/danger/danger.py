"""Test tools: ``danger.echo`` (R0) and ``danger.wipe`` (R3, leaves a marker
in the work directory so a test can tell it never ran)."""

from __future__ import annotations

import os

from naga_plugins import Plugin

plugin = Plugin("danger")


@plugin.tool("danger.echo")
def echo(text: str) -> dict[str, str]:
    return {"echo": text}


@plugin.tool("danger.wipe")
def wipe() -> dict[str, bool]:
    with open(os.path.join(Plugin.work_dir(), "wiped"), "w", encoding="utf-8") as f:
        f.write("wiped\n")
    return {"wiped": True}


main = plugin.main
