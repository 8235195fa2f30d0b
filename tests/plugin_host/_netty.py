"""A plugin that declares one egress destination (its manifest is written
by the test, with the port of a listener the test holds)."""

from __future__ import annotations

import errno
import socket

from naga_plugins import Plugin

plugin = Plugin("netty")


@plugin.tool("netty.connect")
def connect(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "connected"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))


main = plugin.main
