"""A client of the WebChat console protocol (docs/protocol/websocket.md),
for programs on the owner's machine (``naga chat``, scripts): it speaks to
the gateway as the console page does."""

from naga.console import errors
from naga.console._client import ConsoleClient
from naga.console.errors import ConsoleError

__all__ = ["ConsoleClient", "ConsoleError", "errors"]
