"""The console's owner proof, the gateway's side (docs/adr/0007-console-owner-proof.md).

The gateway never decides by address who the owner is: the owner is the
browser (or program) that presents the owner's session cookie, which the
core issued for a one-time login code and checks at every WebSocket
upgrade. The gateway holds no key: it hands codes and cookies to the core
(``RedeemLogin``, ``CheckSession``) and sets or reads the cookie.

The cookie is ``HttpOnly`` (no script of the page, nor one injected into
it, reads it), ``SameSite=Strict`` (a request another site starts carries
none) and ``Path=/``; it is named by the port, because browsers share
cookies among every port of a host (two instances on one machine, each its
own login).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import cast

import attrs

from naga.v1 import console_pb2 as cnpb
from naga_gateway._core import CorePort
from naga_gateway.errors import CoreCallFailed, HandshakeRefused

#: What a person runs to log in; every refusal names it.
LOGIN_COMMAND = "naga console"
NOT_LOGGED_IN = (
    f"not logged in as the owner: run `{LOGIN_COMMAND}` on this machine for a one-time login link"
)
SESSION_ENDED = (
    f"this console login has expired or was revoked: run `{LOGIN_COMMAND}` for a new login link"
)
CODE_REFUSED = (
    f"this login link was already used or has expired: run `{LOGIN_COMMAND}` for a new one"
)
_MAX_COOKIE_VALUE = 256
_SESSION_SHAPE = re.compile(r"v1\.[A-Za-z0-9_-]{1,64}\.[A-Za-z0-9_-]{1,64}")
_MAX_CODE = 64


def cookie_name(port: int) -> str:
    return f"naga_owner_{port}"


def session_cookie(port: int, value: str, max_age_s: int) -> bytes:
    """The ``Set-Cookie`` value that logs a browser in."""
    return (
        f"{cookie_name(port)}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_s}"
    ).encode("ascii")


def cleared_cookie(port: int) -> bytes:
    return f"{cookie_name(port)}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0".encode("ascii")


def cookie_of(headers: Mapping[str, str], name: str) -> str | None:
    """The value of cookie ``name`` in a ``Cookie`` header, if sent."""
    for part in headers.get("cookie", "").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value.strip()
    return None


@attrs.frozen
class Proof:
    """What a request proves: ``owner``, or why not (``refusal``, a
    sentence for a person). ``session``: the owner's session credential,
    which the gateway passes on with every owner change so that the core
    checks it again itself (docs/adr/0029-console-owner-changes.md)."""

    owner: bool
    refusal: str = ""
    session: str = attrs.field(default="", repr=False)


async def check(core: CorePort, headers: Mapping[str, str], port: int) -> Proof:
    """Whether the request carries the owner's session cookie;
    :class:`HandshakeRefused` (503) when the core cannot say."""
    value = cookie_of(headers, cookie_name(port))
    if not value:
        return Proof(False, NOT_LOGGED_IN)
    if len(value) > _MAX_COOKIE_VALUE or _SESSION_SHAPE.fullmatch(value) is None:
        return Proof(False, SESSION_ENDED)  # not one the core issues: no need to ask it
    try:
        verdict = await core.check_session(value)
    except CoreCallFailed as exc:
        raise HandshakeRefused(f"the core cannot check the login now ({exc}); retry", 503) from exc
    if verdict == cnpb.CONSOLE_VERDICT_OWNER:
        return Proof(True, session=value)
    return Proof(False, SESSION_ENDED)


@attrs.frozen
class Redeemed:
    """A login answered: the session credential and its lifetime."""

    session: str
    max_age_s: int


def login_code(body: bytes) -> str:
    """The code of a ``POST /login`` body (``{"code": "..."}``);
    :class:`HandshakeRefused` (400) naming what is wrong."""
    try:
        obj: object = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise HandshakeRefused('the body must be JSON: {"code": "..."}', 400) from None
    code: object = None
    if isinstance(obj, dict):
        code = cast("dict[str, object]", obj).get("code")
    if not isinstance(code, str) or not 0 < len(code) <= _MAX_CODE:
        raise HandshakeRefused('the body must be {"code": "<the login code>"}', 400)
    return code


async def redeem(core: CorePort, code: str, now_ns: int) -> Redeemed:
    """The session for a login code; :class:`HandshakeRefused` (403 for a
    spent, expired or unknown code, 503 when the core cannot say)."""
    try:
        answer = await core.redeem_login(code)
    except CoreCallFailed as exc:
        raise HandshakeRefused(f"the core cannot log you in now ({exc}); retry", 503) from exc
    if answer.verdict != cnpb.CONSOLE_VERDICT_OWNER or not answer.session:
        raise HandshakeRefused(CODE_REFUSED, 403)
    return Redeemed(answer.session, max(0, (answer.expires_ns - now_ns) // 10**9))


__all__ = [
    "CODE_REFUSED",
    "LOGIN_COMMAND",
    "NOT_LOGGED_IN",
    "SESSION_ENDED",
    "Proof",
    "Redeemed",
    "check",
    "cleared_cookie",
    "cookie_name",
    "cookie_of",
    "login_code",
    "redeem",
    "session_cookie",
]
