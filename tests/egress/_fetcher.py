"""A plugin with no network of its own: it fetches through the core's
egress proxy (its manifest, written by the test, asks for egress_proxy and
declares the ports of listeners the test holds)."""

from __future__ import annotations

import errno
import socket

import httpx

from naga_plugins import Plugin, egress_transport

plugin = Plugin("fetcher")


@plugin.tool("fetcher.get")
def get(url: str) -> str:
    try:
        with httpx.Client(transport=egress_transport(), timeout=10) as client:
            answer = client.get(url)
    except httpx.HTTPError as exc:
        return f"error: {exc}"
    return f"{answer.status_code} {answer.text}"


@plugin.tool("fetcher.direct")
def direct(port: int) -> str:
    """A TCP connect of its own, around the proxy."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "connected"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))


main = plugin.main
