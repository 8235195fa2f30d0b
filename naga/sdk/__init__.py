"""The Naga client SDK: typed access to naga-core over its Unix socket.

For programs that drive Naga (the CLI, the gateway, plugins, scripts). It
imports only the contracts (``naga.v1``) and grpcio, never ``naga_core``.
Examples: docs/sdk.md.

    from naga.sdk import Client

    with Client.connect() as core:          # $NAGA_HOME's core, owner credential
        print(core.head().size)
        core.set_setting("agent.max_steps", 30)

A process the core started presents its capability token instead
(``Client.connect(home, credential=Token.from_bytes(raw))``), narrowed
offline with :mod:`naga.tokens` if it hands it on. One that gets a token
per task keeps one connection and presents each task's token over it
(``client.with_credential(token)``).
"""

from naga.sdk import errors
from naga.sdk._address import CoreAddress, default_home, owner_credential, read_credential
from naga.sdk._aio import AsyncClient, AsyncEvents
from naga.sdk._client import Client, Issued, Subscription, TurnEvents

__all__ = [
    "AsyncClient",
    "AsyncEvents",
    "Client",
    "CoreAddress",
    "Issued",
    "Subscription",
    "TurnEvents",
    "default_home",
    "errors",
    "owner_credential",
    "read_credential",
]
