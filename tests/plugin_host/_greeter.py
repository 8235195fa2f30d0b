"""Two versions of one plugin, for replace and its rollback."""

from __future__ import annotations

from naga_plugins import Plugin

v1 = Plugin("greeter")
v2 = Plugin("greeter")


@v1.tool("greeter.greet")
def greet_v1(name: str) -> str:
    return f"hello {name}"


@v2.tool("greeter.greet")
def greet_v2(name: str) -> str:
    return f"bonjour {name}"


main_v1 = v1.main
main_v2 = v2.main
