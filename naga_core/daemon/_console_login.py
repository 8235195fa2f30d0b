"""The owner's proof for the WebChat console (docs/adr/0007-console-owner-proof.md).

An address alone, even loopback, proves nothing (SPEC 4, L0.5): any local
process, a plugin among them, can open a TCP connection to the gateway. The
console's owner is whoever presents a *session credential* the core signed
with the console key, ``$NAGA_HOME/keys/console.key`` (32 random bytes,
0600, created at the first start, read by the core alone).

1. The owner's CLI (``naga console``), which proves itself to the core with
   the 0600 owner credential over the 0600 socket, asks ``IssueLogin`` for a
   one-time *login code* (good once, for :data:`CODE_TTL_NS`), kept here in
   memory, and prints ``http://127.0.0.1:PORT/#login=CODE``.
2. The page reads the code from the fragment (never sent to a server, so
   never in a log or a Referer), drops it from the address bar, and posts it
   to the gateway, which asks ``RedeemLogin``: a code seen for the first
   time and in time becomes a session credential, which the gateway sets as
   an HttpOnly, SameSite=Strict cookie.
3. Every WebSocket upgrade is checked with ``CheckSession``.

A session credential is ``v1.<id and expiry>.<HMAC-SHA256 under the key>``:
the core keeps no table of sessions, so they outlive a gateway restart and a
core restart alike, and ``naga console --revoke`` ends all of them at once
by writing a new key (the gateway is restarted too, so that open
connections drop). The gateway, sandboxed, never sees the key: it holds
only cookies it was given, and asks.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Awaitable, Callable
from typing import Final

from naga.v1 import console_pb2 as cnpb
from naga.v1 import core_pb2 as cpb
from naga_core._home import Home
from naga_core.daemon import _checks
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import AsyncUnary, Method, Unary
from naga_core.daemon._errors import DaemonError
from naga_core.daemon._gateway import GatewayProcess

SERVICE = "naga.v1.ConsoleService"
log = logging.getLogger("naga.core")

CONSOLE_KEY_BYTES: Final = 32
#: A login code is for clicking now: a few minutes, then ask again.
CODE_TTL_NS: Final = 5 * 60 * 10**9
#: A browser stays logged in this long (or until ``naga console --revoke``).
SESSION_TTL_NS: Final = 30 * 24 * 3600 * 10**9
#: Codes outstanding at once (a bound on memory, far above what people and
#: parallel `naga chat`s ask for); the oldest is dropped past it.
MAX_CODES: Final = 1024
#: What the owner runs to log in (named in every refusal).
LOGIN_COMMAND: Final = "naga console"

_VERSION = "v1"
_MAC_CONTEXT = b"naga console session v1\x00"
_CODE_SHAPE = re.compile(r"[A-Za-z0-9_-]{16,64}")
_MAX_SESSION_CHARS = 256


class ConsoleKeyError(DaemonError):
    """The console key file is unusable (its mode, owner, size); the message
    names the file and what to do."""


def console_key_path(home: Home) -> str:
    return os.path.join(home.keys_dir, "console.key")


def load_console_key(home: Home) -> bytes:
    """The console key, created (0600) on the first start."""
    path = console_key_path(home)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return write_console_key(home, replace=False)
    except OSError as exc:
        raise ConsoleKeyError(f"cannot open the console key {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISREG(st.st_mode):
            raise ConsoleKeyError(f"{path} is not a regular file")
        if mode & 0o077:
            raise ConsoleKeyError(f"{path} has mode {mode:04o}; it must be 0600 (chmod 600 {path})")
        if st.st_uid != os.geteuid():
            raise ConsoleKeyError(f"{path} belongs to uid {st.st_uid}, not to this user")
        data = os.read(fd, CONSOLE_KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != CONSOLE_KEY_BYTES:
        raise ConsoleKeyError(
            f"{path} holds {len(data)} bytes, not {CONSOLE_KEY_BYTES}; remove it and start "
            "the core again (every console login ends; run `naga console` for a new one)"
        )
    return data


def write_console_key(home: Home, *, replace: bool) -> bytes:
    """A fresh console key, written atomically (0600); ``replace`` swaps it
    for the present one (every session signed with the old one ends)."""
    key = secrets.token_bytes(CONSOLE_KEY_BYTES)
    path = console_key_path(home)
    os.makedirs(home.keys_dir, mode=0o700, exist_ok=True)
    tmp = f"{path}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:  # created meanwhile: that one is the key
                return load_console_key(home)
        dfd = os.open(home.keys_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise ConsoleKeyError(f"cannot write the console key {path}: {exc.strerror}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return key


class ConsoleLogins:
    """Login codes (in memory, each good once) and session credentials
    (signed, checked against the key). Used on the core's loop only."""

    def __init__(self, key: bytes, *, clock: Callable[[], int] = time.time_ns) -> None:
        if len(key) != CONSOLE_KEY_BYTES:
            raise ValueError(f"a console key is {CONSOLE_KEY_BYTES} bytes")
        self._key = key
        self._clock = clock
        #: sha256(code) -> expiry (Unix ns), oldest first.
        self._codes: dict[bytes, int] = {}

    @classmethod
    def of_home(cls, home: Home, *, clock: Callable[[], int] = time.time_ns) -> ConsoleLogins:
        return cls(load_console_key(home), clock=clock)

    def issue(self) -> tuple[str, int]:
        """A fresh one-time code and its expiry."""
        now = self._clock()
        self._codes = {h: t for h, t in self._codes.items() if t > now}
        while len(self._codes) >= MAX_CODES:
            del self._codes[next(iter(self._codes))]
        code = secrets.token_urlsafe(24)
        expires = now + CODE_TTL_NS
        self._codes[_digest(code)] = expires
        return code, expires

    def redeem(self, code: str) -> cnpb.RedeemLoginResponse:
        """The code's verdict; a session credential when it is the owner's.
        A code is spent by its first redeeming, whatever the verdict."""
        if _CODE_SHAPE.fullmatch(code) is None:
            return cnpb.RedeemLoginResponse(verdict=cnpb.CONSOLE_VERDICT_MALFORMED)
        expires = self._codes.pop(_digest(code), None)
        if expires is None:
            return cnpb.RedeemLoginResponse(verdict=cnpb.CONSOLE_VERDICT_UNKNOWN)
        now = self._clock()
        if expires <= now:
            return cnpb.RedeemLoginResponse(verdict=cnpb.CONSOLE_VERDICT_EXPIRED)
        until = now + SESSION_TTL_NS
        body = secrets.token_bytes(16) + until.to_bytes(8, "big")
        session = f"{_VERSION}.{_b64(body)}.{_b64(self._mac(body))}"
        log.info("console: a login code was redeemed; session %s", body[:4].hex())
        return cnpb.RedeemLoginResponse(
            verdict=cnpb.CONSOLE_VERDICT_OWNER, session=session, expires_ns=until
        )

    def check(self, session: str) -> cnpb.ConsoleVerdict.ValueType:
        parts = session.split(".")
        if len(parts) != 3 or parts[0] != _VERSION:
            return cnpb.CONSOLE_VERDICT_MALFORMED
        try:
            body, mac = _unb64(parts[1]), _unb64(parts[2])
        except (binascii.Error, ValueError):
            return cnpb.CONSOLE_VERDICT_MALFORMED
        # Canonical only: base64's spare bits must not make two spellings of one session.
        if len(body) != 24 or len(mac) != 32 or (_b64(body), _b64(mac)) != (parts[1], parts[2]):
            return cnpb.CONSOLE_VERDICT_MALFORMED
        if not hmac.compare_digest(mac, self._mac(body)):
            return cnpb.CONSOLE_VERDICT_UNKNOWN
        if int.from_bytes(body[16:], "big") <= self._clock():
            return cnpb.CONSOLE_VERDICT_EXPIRED
        return cnpb.CONSOLE_VERDICT_OWNER

    def rekey(self, key: bytes) -> None:
        """Sign with ``key`` from now on; every session and code so far ends."""
        if len(key) != CONSOLE_KEY_BYTES:
            raise ValueError(f"a console key is {CONSOLE_KEY_BYTES} bytes")
        self._key = key
        self._codes.clear()

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, _MAC_CONTEXT + body, hashlib.sha256).digest()


class ConsoleServicer:
    """``naga.v1.ConsoleService``. ``note`` journals a line in the ledger."""

    def __init__(
        self,
        logins: ConsoleLogins,
        home: Home,
        *,
        gateway: GatewayProcess | None,
        note: Callable[[str], Awaitable[object]],
    ) -> None:
        self._logins = logins
        self._home = home
        self._gateway = gateway
        self._note = note

    def methods(self) -> list[Method]:
        return [
            Unary("IssueLogin", cnpb.IssueLoginRequest, self.issue_login),
            Unary("RedeemLogin", cnpb.RedeemLoginRequest, self.redeem_login, check_redeem),
            Unary("CheckSession", cnpb.CheckSessionRequest, self.check_session, check_session),
            AsyncUnary(
                "RevokeSessions", cnpb.RevokeSessionsRequest, self.revoke_sessions, check_revoke
            ),
        ]

    def issue_login(self, _p: Principal, _req: cnpb.IssueLoginRequest) -> cnpb.IssueLoginResponse:
        code, expires = self._logins.issue()
        gateway = self._gateway
        running = gateway is not None and gateway.state == cpb.PROCESS_STATE_RUNNING
        url = f"{gateway.url}#login={code}" if gateway is not None and running else ""
        return cnpb.IssueLoginResponse(code=code, expires_ns=expires, url=url)

    def redeem_login(self, _p: Principal, req: cnpb.RedeemLoginRequest) -> cnpb.RedeemLoginResponse:
        return self._logins.redeem(req.code)

    def check_session(
        self, _p: Principal, req: cnpb.CheckSessionRequest
    ) -> cnpb.CheckSessionResponse:
        return cnpb.CheckSessionResponse(verdict=self._logins.check(req.session))

    async def revoke_sessions(
        self, p: Principal, req: cnpb.RevokeSessionsRequest
    ) -> cnpb.RevokeSessionsResponse:
        self._logins.rekey(write_console_key(self._home, replace=True))
        said = f"console: every WebChat login revoked by {p.name}" + (
            f": {req.reason}" if req.reason else ""
        )
        await self._note(said)
        gateway = self._gateway
        if gateway is None or gateway.state != cpb.PROCESS_STATE_RUNNING:
            return cnpb.RevokeSessionsResponse(gateway_restarted=False)
        # Open connections were admitted with the old key: they drop.
        answer = await gateway.restart("console logins revoked")
        return cnpb.RevokeSessionsResponse(gateway_restarted=answer.serving)


def check_redeem(req: cnpb.RedeemLoginRequest) -> None:
    _checks.text("code", req.code, max_chars=64)


def check_session(req: cnpb.CheckSessionRequest) -> None:
    _checks.text("session", req.session, max_chars=_MAX_SESSION_CHARS)


def check_revoke(req: cnpb.RevokeSessionsRequest) -> None:
    _checks.text("reason", req.reason, max_chars=500, required=False)


def _digest(code: str) -> bytes:
    return hashlib.sha256(code.encode()).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


__all__ = [
    "CODE_TTL_NS",
    "LOGIN_COMMAND",
    "SERVICE",
    "SESSION_TTL_NS",
    "ConsoleKeyError",
    "ConsoleLogins",
    "ConsoleServicer",
    "console_key_path",
    "load_console_key",
    "write_console_key",
]
