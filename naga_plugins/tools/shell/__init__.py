"""The shell plugin: ``shell.run`` checks and plans a command; the core runs
the plan in a sandbox of its own over a staged copy of the workspace and
captures what it changed (docs/design/tools.md). This worker itself can run
nothing: its sandbox has no execve."""

from __future__ import annotations

from naga_plugins import Plugin, ToolFailed

plugin = Plugin("shell")
#: Seconds a command runs when the call gives no timeout.
DEFAULT_TIMEOUT_S = 30


@plugin.tool("shell.run")
def run(command: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> dict[str, object]:
    if not command.strip():
        raise ToolFailed("the command is empty")
    return {"run": {"argv": ["/bin/sh", "-c", command], "timeout_s": timeout_s}}


main = plugin.main
