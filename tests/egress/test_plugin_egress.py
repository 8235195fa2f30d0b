"""A sandboxed plugin under the real core reaches the network only through
the core's egress proxy: its declared host and port (a loopback listener
standing in, allowed by ``egress.loopback_hosts``), nothing else; a TCP
socket of its own is refused by the sandbox; every refusal is journaled."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from naga.sdk import Client
from naga_core.plugins import PluginsConfig
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import READY_S, STEADY

FETCHER = """\
name = "fetcher"
version = "1.0.0"
kind = "tool"
description = "Fetches through the egress proxy (tests only)"
entry = "tests.egress._fetcher:main"
capabilities = ["egress_proxy"]

[[egress]]
host = "127.0.0.1"
port = {port}

[[egress]]
host = "localhost"
port = {other}

[[tools]]
name = "fetcher.get"
risk = "R1"
description = "GET a URL"
[tools.params.url]
type = "string"
max_length = 200

[[tools]]
name = "fetcher.direct"
risk = "R1"
description = "TCP connect to 127.0.0.1:port without the proxy"
[tools.params.port]
type = "integer"
minimum = 1
maximum = 65535
"""


class _Named(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.server.server_port}".encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Served:
    core: InProcessCore
    client: Client
    api: ThreadingHTTPServer
    other: ThreadingHTTPServer

    def get(self, url: str) -> str:
        result = self.client.invoke("fetcher", "fetcher.get", {"url": url}, timeout=30)
        assert isinstance(result, str)
        return result


def _listener() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Named)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    root = tempfile.mkdtemp(prefix="naga-e-")
    home = os.path.join(root, "home")
    api, other = _listener(), _listener()
    plugins = os.path.join(root, "plugins")
    os.makedirs(os.path.join(plugins, "fetcher"))
    Path(plugins, "fetcher", "plugin.toml").write_text(
        FETCHER.format(port=api.server_port, other=other.server_port)
    )
    try:
        with core_in_thread(home, plugins=PluginsConfig(roots=(plugins,), tuning=STEADY)) as core:
            with core.client() as client:
                client.set_setting_text("egress.loopback_hosts", "127.0.0.1")
                info = client.enable_plugin("fetcher", wait=READY_S).plugin
                assert info.pid > 0, info
                yield Served(core, client, api, other)
                client.shutdown("tests done")
            assert not core.join().failed
        verify_home(home)
    finally:
        api.shutdown()
        other.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def test_the_declared_host_and_port_are_reached_through_the_proxy(served: Served) -> None:
    port = served.api.server_port
    assert served.get(f"http://127.0.0.1:{port}/") == f"200 hello from {port}"


def test_everything_else_is_refused_with_its_reason(served: Served) -> None:
    api, other = served.api.server_port, served.other.server_port
    # Declared host, another port.
    assert "(port_not_allowed)" in served.get(f"http://127.0.0.1:{other}/")
    # Declared name, but not a loopback stand-in: its loopback address is refused.
    assert "(address_forbidden)" in served.get(f"http://localhost:{other}/")
    # Not declared at all.
    assert "(host_not_allowed)" in served.get(f"http://example.org:{api}/")
    assert "(host_not_allowed)" in served.get(f"http://[::1]:{api}/")


def test_a_socket_of_its_own_is_refused_by_the_sandbox(served: Served) -> None:
    port = served.api.server_port
    assert served.client.invoke("fetcher", "fetcher.direct", {"port": port}) == "EPERM"


def test_refusals_are_in_the_ledger_and_a_setting_change_counts_from_the_next_connection(
    served: Served,
) -> None:
    other = served.other.server_port
    assert "(address_forbidden)" in served.get(f"http://localhost:{other}/x")
    entries = served.client.history(limit=200).entries
    refused = [e.description for e in entries if "egress: plugin fetcher" in e.description]
    assert any(f"localhost:{other} refused" in d for d in refused), refused
    served.client.set_setting_text("egress.loopback_hosts", "127.0.0.1,localhost")
    try:
        assert served.get(f"http://localhost:{other}/") == f"200 hello from {other}"
    finally:
        served.client.set_setting_text("egress.loopback_hosts", "127.0.0.1")
