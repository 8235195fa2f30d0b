"""web.fetch through the real core and the real sandboxed plugin, its only
network the core's egress proxy: a loopback HTTP server stands in for a
public host (``egress.loopback_hosts`` lists ``localhost``). A page's HTML
becomes text; a huge body is cut with a note; loopback and private
addresses, a host outside ``web.allowed_hosts`` and a non-HTTP scheme are
refused with the reason; a fetch is irreversible in a rollback's dry run."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from naga.sdk import Client
from tests.tools._turns import Call, last_seq, results, tool_turn
from tests.tools.conftest import ToolsCore

PAGE = b"""<!doctype html><html><head><title>The  Test Page</title>
<style>body { color: red }</style><script>var hidden = 1;</script></head>
<body><h1>Hello &amp; welcome</h1><p>First paragraph.</p><ul><li>one</li><li>two</li></ul>
</body></html>"""
HUGE = 5_000_000


class _Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/huge":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(HUGE))
            self.end_headers()
            chunk = b"x" * 65536
            sent = 0
            try:
                while sent < HUGE:
                    self.wfile.write(chunk[: HUGE - sent])
                    sent += len(chunk)
            except OSError:  # the reader stopped at its cap: expected
                pass
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def web(tools_core: ToolsCore, owner: Client) -> Iterator[Client]:
    owner.set_setting_text("egress.loopback_hosts", "localhost")
    yield owner
    owner.reset_setting("egress.loopback_hosts")
    owner.reset_setting("web.allowed_hosts")


def test_a_page_becomes_text_and_is_irreversible(
    tools_core: ToolsCore, web: Client, site: int
) -> None:
    mark = last_seq(web)
    (page,) = results(
        tool_turn(
            tools_core,
            web,
            "web-page",
            [("web.fetch", {"url": f"http://localhost:{site}/page#top"})],
        )
    )
    assert page.ok, page.error
    got = json.loads(page.result_json)
    assert got["status"] == 200
    assert got["title"] == "The Test Page"
    assert got["text"] == "Hello & welcome\n\nFirst paragraph.\n\none\n\ntwo"
    assert "truncated" not in got
    preview = web.rollback(mark, dry_run=True).preview
    described = {e.seq: e.description for e in web.history(limit=50).entries}
    fetches = [s for s in preview.irreversible_seqs if "tool web.fetch" in described.get(s, "")]
    assert len(fetches) == 1, (list(preview.irreversible_seqs), described)
    assert "cannot be undone" in described[fetches[0]]


def test_a_huge_body_is_cut_with_a_note(tools_core: ToolsCore, web: Client, site: int) -> None:
    (huge,) = results(
        tool_turn(
            tools_core, web, "web-huge", [("web.fetch", {"url": f"http://localhost:{site}/huge"})]
        )
    )
    assert huge.ok, huge.error
    got = json.loads(huge.result_json)
    assert "text" in got, huge.result_json[:2000]
    assert len(got["text"]) == 10_000
    assert set(got["text"]) == {"x"}
    assert "the body was cut at 1000000 bytes" in got["truncated"]
    assert "the text was cut at 10000 of 1000000 characters" in got["truncated"]


def test_refusals_say_why(tools_core: ToolsCore, web: Client, site: int) -> None:
    calls: list[Call] = [
        ("web.fetch", {"url": "http://127.0.0.1/"}),
        ("web.fetch", {"url": "http://10.0.0.1/"}),
        ("web.fetch", {"url": "https://169.254.169.254/latest/meta-data"}),
        ("web.fetch", {"url": "file:///etc/passwd"}),
        ("web.fetch", {"url": "ftp://example.org/x"}),
        ("web.fetch", {"url": "http://example.org:8080/"}),
    ]
    loop, private, metadata, file, ftp, port = results(tool_turn(tools_core, web, "web-no", calls))
    assert not any(a.ok for a in (loop, private, metadata, file, ftp, port))
    for answer, why in ((loop, "loopback"), (private, "private"), (metadata, "link-local")):
        assert "(address_forbidden)" in answer.error, answer.error
        assert f"({why})" in answer.error, answer.error
    assert "only http and https URLs can be fetched, not 'file'" in file.error, file.error
    assert "not 'ftp'" in ftp.error
    assert "(port_not_allowed)" in port.error, port.error
    assert "80, 443" in port.error, port.error

    web.set_setting_text("web.allowed_hosts", "example.org,*.example.net")
    (other,) = results(
        tool_turn(
            tools_core, web, "web-host", [("web.fetch", {"url": f"http://localhost:{site}/"})]
        )
    )
    assert not other.ok
    assert "(host_not_allowed)" in other.error, other.error
    assert "example.org" in other.error
