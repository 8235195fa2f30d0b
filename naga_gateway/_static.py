"""The console's static files, each script and style sheet under a
versioned address (``/app.js?v=<its sha256>``) that index.html names.

A versioned file never changes under its address, so the browser may keep
it (``immutable``) and, from the second load on, run the scripts from its
cache and its compiled-code cache instead of fetching and parsing 160 KB
again (bench/console.py). The page itself is never stored (``no-store``):
it names the versions this gateway serves, so a new version is fetched
the first time the page names it. An address with another version (a
page from an older gateway) gets today's file, not stored either.
"""

from __future__ import annotations

import hashlib
from importlib import resources

import attrs

#: address -> (file under static/, content type)
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/admin.js": ("admin.js", "text/javascript; charset=utf-8"),
    "/skills.js": ("skills.js", "text/javascript; charset=utf-8"),
    "/memory.js": ("memory.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    # Named by the page, so the browser asks for no /favicon.ico (a 404).
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
    # The console's vendored Markdown renderer and sanitizer (docs/console.md).
    "/vendor/marked.js": ("vendor/marked.js", "text/javascript; charset=utf-8"),
    "/vendor/purify.js": ("vendor/purify.js", "text/javascript; charset=utf-8"),
}
_PAGE = "index.html"
NO_STORE = b"no-store"
KEEP = b"public, max-age=31536000, immutable"


@attrs.frozen
class File:
    body: bytes
    ctype: str
    #: The version index.html names it with; empty for the page itself.
    version: str

    def cache_control(self, query: str) -> bytes:
        """Stored only when asked by the version it is."""
        return KEEP if self.version and query == f"v={self.version}" else NO_STORE


def load() -> dict[str, File]:
    """Every address the console serves, the page naming each file by version."""
    raw = {
        name: resources.files("naga_gateway").joinpath("static", name).read_bytes()
        for name, _ in FILES.values()
    }
    versions = {
        name: hashlib.sha256(body).hexdigest()[:16] for name, body in raw.items() if name != _PAGE
    }
    page = raw[_PAGE]
    for path, (name, _) in FILES.items():
        if name in versions:
            page = page.replace(f'"{path}"'.encode(), f'"{path}?v={versions[name]}"'.encode())
    out: dict[str, File] = {}
    for path, (name, ctype) in FILES.items():
        body = page if name == _PAGE else raw[name]
        out[path] = File(body, ctype, versions.get(name, ""))
    return out


__all__ = ["FILES", "KEEP", "NO_STORE", "File", "load"]
