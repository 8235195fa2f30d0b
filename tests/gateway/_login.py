"""The one way tests (and the benches) become the console's owner: by the
owner's proof, as a person does (docs/adr/0007-console-owner-proof.md).

An address proves nothing, so every test that needs the owner asks for a
one-time login code (``codes``: the fake core's :meth:`FakeCore.login_code`,
or the real core's IssueLogin through the SDK, as ``naga console`` does),
trades it at ``POST /login`` for the session cookie, and presents that
cookie on its WebSocket upgrade; a browser opens the login link.

    ws = await owner_client(port, core.login_code)       # a WsClient, not yet connected
    login_browser(driver, port, core.login_code())       # a selenium driver, logged in
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Any

import trio

from naga.sdk import Client
from tests.gateway._client import WsClient

#: Issues one login code per call.
LoginCodes = Callable[[], str]


def core_codes(home: str) -> LoginCodes:
    """Codes from the real core of ``home``, over its 0600 socket with the
    owner credential (what ``naga console`` does)."""

    def issue() -> str:
        with Client.connect(home) as core:
            return core.console_login().code

    return issue


def login_url(port: int, code: str) -> str:
    """The link ``naga console`` prints: the code in the fragment, which no
    request carries."""
    return f"http://127.0.0.1:{port}/#login={code}"


async def http(
    port: int,
    method: str,
    path: str,
    *,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request on a fresh connection: status, headers (lower-
    case names; ``set-cookie`` is the last one), body."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        raw = b""
        while chunk := await stream.receive_some(65536):
            raw += chunk
    finally:
        await stream.aclose()
    head, _, rest = raw.partition(b"\r\n\r\n")
    first, *fields = head.decode("latin-1").split("\r\n")
    found: dict[str, str] = {}
    for field in fields:
        name, _, value = field.partition(":")
        found[name.strip().lower()] = value.strip()
    return int(first.split(" ", 2)[1]), found, rest


async def login(port: int, code: str, *, origin: str | None = None) -> tuple[int, dict[str, Any]]:
    """``POST /login`` with ``code`` as the page does: the status and the
    JSON answer (``cookie``: the ``Cookie`` header value to send, when set)."""
    headers = {"Content-Type": "application/json"}
    if origin is not None:
        headers["Origin"] = origin
    status, found, body = await http(
        port, "POST", "/login", body=json.dumps({"code": code}).encode(), headers=headers
    )
    answer: dict[str, Any] = json.loads(body)
    if "set-cookie" in found:
        answer["cookie"] = found["set-cookie"].split(";", 1)[0]
        answer["set_cookie"] = found["set-cookie"]
    return status, answer


async def owner_cookie(port: int, codes: LoginCodes) -> str:
    """The owner's ``Cookie`` header value, from a fresh login code."""
    code = await trio.to_thread.run_sync(codes)
    status, answer = await login(port, code)
    assert status == 200, answer
    assert "cookie" in answer, answer
    return str(answer["cookie"])


async def owner_client(
    port: int, codes: LoginCodes, *, origin: str | None = None, extra: bytes = b""
) -> WsClient:
    """A WebSocket to the gateway carrying the owner's cookie (``connect``
    not sent yet)."""
    cookie = await owner_cookie(port, codes)
    return await WsClient.open(port, origin=origin, extra=extra, cookie=cookie)


def login_browser(driver: Any, port: int, code: str, *, wait_s: float = 15.0) -> None:
    """Open the login link in ``driver`` and wait until the console is
    connected as the owner."""
    driver.get(login_url(port, code))
    wait_connected(driver, wait_s=wait_s)


def wait_connected(driver: Any, *, wait_s: float = 15.0) -> None:
    """Wait until the page's connection indicator says ``open``."""
    ui = importlib.import_module("selenium.webdriver.support.ui")

    def connected(d: Any) -> bool:
        return conn_state(d) == "open"

    ui.WebDriverWait(driver, wait_s).until(connected)


def conn_state(driver: Any) -> str:
    """The page's connection indicator (``open``, ``logged out``...)."""
    return str(driver.find_element("id", "conn").get_attribute("data-state"))


__all__ = [
    "LoginCodes",
    "conn_state",
    "core_codes",
    "http",
    "login",
    "login_browser",
    "login_url",
    "owner_client",
    "owner_cookie",
    "wait_connected",
]
