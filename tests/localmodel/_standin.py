"""Stand-ins for llama_cpp.server, run by the real launcher as ``-m`` modules.

They take the same command line (``--port``, ``--model_alias``, ...) and
misbehave in one chosen way, selected by ``NAGA_STANDIN``:

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
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model_alias", required=True)
    args, _ = parser.parse_known_args()
    return args


def _answer(port: int, alias: str) -> None:
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

    server = HTTPServer(("127.0.0.1", port), Handler)
    print(f"standin answering on {port}", flush=True)
    server.serve_forever()


def _silent(port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port))
    print(f"standin silent on {port}", flush=True)
    held: list[socket.socket] = []
    while True:
        conn, _ = listener.accept()
        held.append(conn)  # kept open, never read or answered


def main() -> None:
    args = _args()
    mode = os.environ["NAGA_STANDIN"]
    if mode == "exit":
        print("standin: cannot load the model (on purpose)", flush=True)
        sys.exit(3)
    if mode == "silent":
        _silent(args.port)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _answer(args.port, args.model_alias)


if __name__ == "__main__":
    main()
