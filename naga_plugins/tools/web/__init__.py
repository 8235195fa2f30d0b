"""The web plugin: ``web.fetch``, one HTTP(S) GET through the core's egress
proxy (``naga_plugins.egress_transport``). Which hosts it may reach, and
that no address is loopback, private or link-local, is the proxy's check
(``web.allowed_hosts``); this side refuses what is not http(s), caps the
body at :data:`BODY_LIMIT` bytes and the text at :data:`TEXT_LIMIT`
characters (saying so), and turns HTML into text with the standard
library's parser.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from html.parser import HTMLParser

import httpx

from naga_plugins import Plugin, ToolFailed, egress_transport

plugin = Plugin("web")
#: Most bytes of a body read; the rest is not fetched.
BODY_LIMIT = 1_000_000
#: Most characters of text the model gets, and most bytes of it as JSON:
#: under the core's cap on a tool result shown to the model (about 12 KB),
#: so the answer arrives whole, its note included.
TEXT_LIMIT = 10_000
TEXT_JSON_LIMIT = 10_500
MAX_REDIRECTS = 5
_TIMEOUT = httpx.Timeout(20.0, connect=10.0)
_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head"})
_BLOCK = frozenset(
    {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section",
     "article", "header", "footer", "table", "ul", "ol", "blockquote", "hr", "title"}
)  # fmt: skip


class _Text(HTMLParser):
    """Visible text; block elements start new lines; the title kept apart."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIP:
            self._skip += 1
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIP and self._skip:
            self._skip -= 1
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)

    def text(self) -> str:
        lines = (
            re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(self.parts).split("\n")
        )
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def html_text(html: str) -> tuple[str, str]:
    """The title and the visible text of ``html``."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    return " ".join(parser.title.split()), parser.text()


def _checked(url: str) -> str:
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        scheme = parts.scheme or "a URL without a scheme"
        raise ToolFailed(f"only http and https URLs can be fetched, not {scheme!r}")
    if not parts.hostname:
        raise ToolFailed(f"the URL {url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise ToolFailed("a URL with a user name or password is not fetched")
    return urllib.parse.urlunsplit(parts._replace(fragment=""))


@plugin.tool("web.fetch")
def fetch(url: str) -> dict[str, object]:
    target = _checked(url)
    try:
        with (
            httpx.Client(
                transport=egress_transport(),
                timeout=_TIMEOUT,
                follow_redirects=True,
                max_redirects=MAX_REDIRECTS,
                headers={"User-Agent": "Naga web.fetch/1.0"},
            ) as client,
            client.stream("GET", target) as response,
        ):
            body = bytearray()
            cut = False
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > BODY_LIMIT:
                    del body[BODY_LIMIT:]
                    cut = True
                    break
            final, status = str(response.url), response.status_code
            kind = response.headers.get("content-type", "")
            charset = response.charset_encoding or "utf-8"
    except httpx.ConnectError as exc:  # the proxy's refusal says why
        raise ToolFailed(f"cannot fetch {target}: {exc}") from None
    except httpx.TooManyRedirects:
        raise ToolFailed(f"{target} redirects more than {MAX_REDIRECTS} times") from None
    except httpx.HTTPError as exc:
        raise ToolFailed(f"cannot fetch {target}: {type(exc).__name__}: {exc}") from None
    try:
        decoded = bytes(body).decode(charset, "replace")
    except LookupError:
        decoded = bytes(body).decode("utf-8", "replace")
    out: dict[str, object] = {"url": final, "status": status, "content_type": kind}
    if "html" in kind.lower() or (not kind and "<html" in decoded[:1000].lower()):
        title, text = html_text(decoded)
        if title:
            out["title"] = title
    elif kind.startswith("text/") or "json" in kind or "xml" in kind or not kind:
        text = decoded
    else:
        raise ToolFailed(f"{final} is {kind}, not text or HTML: not shown")
    notes: list[str] = []
    if cut:
        notes.append(f"the body was cut at {BODY_LIMIT} bytes (the rest was not fetched)")
    shown = text[:TEXT_LIMIT]
    while len(json.dumps(shown)) > TEXT_JSON_LIMIT:  # escapes: non-ASCII text
        shown = shown[: len(shown) * 9 // 10]
    if len(shown) < len(text):
        notes.append(f"the text was cut at {len(shown)} of {len(text)} characters")
    if notes:
        out["truncated"] = "; ".join(notes)
    out["text"] = shown
    return out


main = plugin.main
