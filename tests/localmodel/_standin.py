"""Stand-ins for the llama server, run by the real launcher in the real
``model_server`` sandbox as targets (``tests.localmodel._standin:answer``).

They take the same argument list as ``naga_plugins.localmodel.llama:main``
(lifeline, listening socket, grace, then the server's flags, of which they
read ``--model_alias``) and misbehave in one chosen way, one target each:

- ``answer``: serve ``GET /v1/models`` listing the alias (a working server);
- ``silent``: accept connections and never answer;
- ``exit``: print a last word and exit with status 3;
- ``stubborn``: answer like ``answer`` but ignore SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
from http.server import BaseHTTPRequestHandler, HTTPServer

from naga_plugins.localmodel import serve


class _Inherited(HTTPServer):
    # The constructor makes a socket before we swap in the inherited one;
    # the sandbox allows only Unix ones.
    address_family = socket.AF_UNIX


def _alias(args: list[str]) -> str:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_alias", required=True)
    known, _ = parser.parse_known_args(args)
    alias: str = known.model_alias
    return alias


def _answer(listener: socket.socket, args: list[str]) -> int:
    alias = _alias(args)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            # The environment's names ride along, for the scrubbing test.
            listing = {"object": "list", "data": [{"id": alias}], "env": sorted(os.environ)}
            body = json.dumps(listing).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = _Inherited(listener.getsockname(), Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = listener
    print(f"standin answering on {listener.getsockname()[1]}", flush=True)
    server.serve_forever()
    return 0


def _silent(listener: socket.socket, _args: list[str]) -> int:
    print(f"standin silent on {listener.getsockname()[1]}", flush=True)
    held: list[socket.socket] = []
    while True:
        conn, _ = listener.accept()
        held.append(conn)  # kept open, never read or answered


def _exit(_listener: socket.socket, _args: list[str]) -> int:
    print("standin: cannot load the model (on purpose)", flush=True)
    return 3


def _stubborn(listener: socket.socket, args: list[str]) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return _answer(listener, args)


def answer(args: list[str]) -> int:
    return serve(args, _answer)


def silent(args: list[str]) -> int:
    return serve(args, _silent)


def exit_(args: list[str]) -> int:
    return serve(args, _exit)


def stubborn(args: list[str]) -> int:
    return serve(args, _stubborn)
