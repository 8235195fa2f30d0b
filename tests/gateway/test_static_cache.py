"""The console's static files under versioned addresses
(naga_gateway._static): the page is never stored and names each script and
style sheet by its content's sha256; a file asked by its version may be
kept for good (the second load runs from the browser's cache); asked
without it or by another version, it is today's file, not stored. Against
a real gateway over HTTP (the core is the fake: no call reaches it)."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from naga_gateway import Gateway
from naga_gateway import _static as static
from tests.fakes.turn_core import FakeCore
from tests.gateway._login import http
from tests.gateway.conftest import run_gateway

_NAMED = re.compile(r'(?:src|href)="(/[^"?]+)\?v=([0-9a-f]{16})"')


def test_the_page_names_versions_the_files_are_kept_by(fake_core: tuple[FakeCore, str]) -> None:
    _, socket = fake_core

    async def body(gw: Gateway) -> None:
        port = gw.port
        status, head, page = await http(port, "GET", "/")
        assert status == 200
        assert head["cache-control"] == "no-store"
        named = dict(_NAMED.findall(page.decode()))
        # The page names its icon: the browser asks for no /favicon.ico.
        assert '<link rel="icon" type="image/svg+xml" href="/favicon.svg?v=' in page.decode()
        scripts = {p for p, (_, ctype) in static.FILES.items() if ctype != static.FILES["/"][1]}
        assert set(named) == scripts, named
        for path, version in named.items():
            name = static.FILES[path][0]
            on_disk = resources.files("naga_gateway").joinpath("static", name).read_bytes()
            assert version == hashlib.sha256(on_disk).hexdigest()[:16]
            status, head, got = await http(port, "GET", f"{path}?v={version}")
            assert (status, got) == (200, on_disk)
            assert head["cache-control"] == "public, max-age=31536000, immutable"
            for other in (path, f"{path}?v={'0' * 16}", f"{path}?x=1"):
                status, head, got = await http(port, "GET", other)
                assert (status, got, head["cache-control"]) == (200, on_disk, "no-store"), other
        # Everything else the gateway answers is never stored either.
        for path in ("/session", "/nope"):
            assert (await http(port, "GET", path))[1]["cache-control"] == "no-store"

    run_gateway(socket, body)
