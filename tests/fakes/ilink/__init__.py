"""A fake iLink bot server (ILINK_PROTOCOL.md) over real HTTP on loopback."""

from tests.fakes.ilink._crypto import decrypt, encrypt, key_field
from tests.fakes.ilink._http import Request, Response
from tests.fakes.ilink._server import QR, Bot, Context, FakeILink, Sent, Typing
from tests.fakes.ilink._thread import ILinkThread, ilink_thread

__all__ = [
    "QR",
    "Bot",
    "Context",
    "FakeILink",
    "ILinkThread",
    "Request",
    "Response",
    "Sent",
    "Typing",
    "decrypt",
    "encrypt",
    "ilink_thread",
    "key_field",
]
