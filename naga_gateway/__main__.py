"""``python -m naga_gateway``: the gateway as a process, as the supervisor
starts it inside ``sandbox.Profile.gateway(core_socket)``.

``--listen-fd N`` is the listening TCP socket it serves: the core binds the
console's address and hands the socket over, since the sandboxed gateway
may make, bind or listen on no TCP socket of its own. Without it (a gateway
run by hand, outside the core) it binds ``--host``:``--port`` itself.

The core's socket and the gateway's capability token (role ``gateway``,
base64) come in the environment the sandbox passes (``CORE_SOCKET_ENV``,
``TOKEN_ENV``), never on the command line, where other users could read
them. Once listening it prints one line, ``naga-gateway listening on
HOST:PORT``, to stdout (the supervisor's readiness signal).

``--lifeline-fd N`` is the read end of a pipe whose write end only the core
holds: nothing is ever written, so the end of file means the core is gone
(killed outright, with no chance to stop its children). The gateway then
stops by itself instead of living on as an orphan that holds the WebChat
port against the next core's gateway.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import signal
import socket
import sys

import trio

from naga.constants import CORE_SOCKET_ENV, TOKEN_ENV
from naga.tokens import CAPABILITY_SCHEME
from naga_gateway._core import GrpcCore
from naga_gateway._server import DEFAULT_PORT, Gateway, GatewayConfig


def _authorization() -> str:
    raw = os.environ.get(TOKEN_ENV, "")
    try:
        token = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        token = b""
    if not token:
        sys.exit(f"naga-gateway: {TOKEN_ENV} must hold the gateway's capability token (base64)")
    return f"{CAPABILITY_SCHEME} {base64.b64encode(token).decode('ascii')}"


async def _outlive_not(lifeline: int, scope: trio.CancelScope) -> None:
    """Stop the gateway once the core's end of the lifeline is closed."""
    await trio.lowlevel.wait_readable(lifeline)
    print("naga-gateway: the core is gone; stopping", file=sys.stderr, flush=True)
    scope.cancel()


def _check_listener(fd: int) -> None:
    """Exit with a clear message unless ``fd`` is a listening TCP socket."""
    try:
        probe = socket.socket(fileno=os.dup(fd))
    except OSError as exc:
        sys.exit(f"naga-gateway: --listen-fd {fd} is not an open socket: {exc}")
    with probe:
        listening = probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        tcp = probe.family in (socket.AF_INET, socket.AF_INET6)
        if not (tcp and probe.type == socket.SOCK_STREAM and listening):
            sys.exit(f"naga-gateway: --listen-fd {fd} is not a listening TCP socket")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="naga-gateway", description="The Naga gateway")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument(
        "--lifeline-fd", type=int, default=None, help="stop when this pipe ends (the core)"
    )
    parser.add_argument(
        "--listen-fd", type=int, default=None, help="serve this listening TCP socket (the core's)"
    )
    args = parser.parse_args(argv)
    lifeline: int | None = args.lifeline_fd
    listen_fd: int | None = args.listen_fd
    if listen_fd is not None:
        _check_listener(listen_fd)
    if lifeline is not None:
        try:
            os.fstat(lifeline)
        except OSError as exc:
            sys.exit(f"naga-gateway: --lifeline-fd {lifeline} is not an open descriptor: {exc}")
    core_socket = os.environ.get(CORE_SOCKET_ENV)
    if not core_socket:
        sys.exit(f"naga-gateway: {CORE_SOCKET_ENV} must name the core's socket")
    core = GrpcCore(core_socket, _authorization())
    gateway = Gateway(core, GatewayConfig(host=args.host, port=args.port, listen_fd=listen_fd))

    async def serve() -> None:
        # SIGTERM (the supervisor) and SIGINT (a terminal) stop it cleanly.
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(gateway.serve)
                if lifeline is not None:
                    nursery.start_soon(_outlive_not, lifeline, nursery.cancel_scope)
                # On stderr (the core's log, under its name) before the
                # readiness line, so the core has it once the gateway is up.
                print(f"naga-gateway: serving on {args.host}:{port}", file=sys.stderr, flush=True)
                print(f"naga-gateway listening on {args.host}:{port}", flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(serve)
    finally:
        core.close()


if __name__ == "__main__":
    main()
