"""The console's owner is proven, never inferred from the address (issue 11,
item 3; docs/adr/0007-console-owner-proof.md).

The attack: any local process (a plugin with egress to the gateway's port,
another user of the machine) opened ``/ws`` on loopback and was the owner.
Here a loopback client without the owner's cookie is refused with the
sentence that says how to log in, through the real core and its sandboxed
gateway; a login code is good once; a forged cookie is nobody's; a login
outlives a core restart; ``naga console --revoke`` ends it. The HTTP edge
cases (methods, content types, sizes, a foreign Origin) run against the
fake core, which redeems with the real core's ConsoleLogins."""

from __future__ import annotations

import json
import os
import stat

import pytest
import trio

from naga_core._home import Home
from naga_core.cli import main as cli_main
from naga_core.daemon import GatewayOptions, console_key_path
from naga_gateway import CODE_REFUSED, NOT_LOGGED_IN, SESSION_ENDED, Gateway
from tests.daemon.conftest import core_in_thread, home
from tests.fakes.turn_core import FakeCore
from tests.gateway._client import Closed, WsClient
from tests.gateway._login import core_codes, http, login, owner_client, owner_cookie
from tests.gateway._ports import free_ports
from tests.gateway.conftest import run_gateway

__all__ = ["home"]  # the fixture, used by name below


async def _refused(port: int, cookie: str | None = None) -> Closed:
    with pytest.raises(Closed) as info:
        await WsClient.open(port, cookie=cookie)
    return info.value


async def _until_closed(c: WsClient) -> Closed:
    while True:
        try:
            await c.recv()
        except Closed as exc:
            return exc


def _console_json(home: str, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    capsys.readouterr()
    code = cli_main(["console", "--home", home, "--json", *extra])
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    assert code == 0, out
    return out


def test_a_loopback_client_without_the_owners_proof_is_refused_by_the_real_gateway(
    home: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (port,) = free_ports(1)
    with core_in_thread(home, gateway=GatewayOptions(enabled=True, port=port)):
        key = console_key_path(Home(home))
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600

        async def attack() -> None:
            refused = await _refused(port)
            assert refused.code == 401
            assert NOT_LOGGED_IN in refused.reason
            assert "run `naga console`" in refused.reason
            forged = await _refused(port, f"naga_owner_{port}=v1.AAAA.BBBB")
            assert (forged.code, SESSION_ENDED in forged.reason) == (401, True)

        trio.run(attack)

        # `naga console` prints the link; its code logs in once.
        said = _console_json(home, capsys)
        url = str(said["url"])
        code = str(said["code"])
        assert url == f"http://127.0.0.1:{port}/#login={code}"
        capsys.readouterr()
        assert cli_main(["dashboard", "--home", home]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "Open the WebChat console (a one-time link, good for 5 minutes):"
        assert lines[1].startswith(f"  http://127.0.0.1:{port}/#login=")

        async def log_in() -> None:
            status, answer = await login(port, code)
            assert status == 200, answer
            assert "HttpOnly" in answer["set_cookie"]
            assert "SameSite=Strict" in answer["set_cookie"]
            c = await WsClient.open(port, cookie=answer["cookie"])
            assert (await c.connect())["trust"] == "owner"
            await c.aclose()
            again, spent = await login(port, code)
            assert (again, spent["error"]) == (403, CODE_REFUSED)

        trio.run(log_in)


def test_a_login_outlives_a_core_restart_and_revoke_ends_it(
    home: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (port,) = free_ports(1)
    options = GatewayOptions(enabled=True, port=port)
    with core_in_thread(home, gateway=options) as core:
        cookie = trio.run(owner_cookie, port, core_codes(home))
        with core.client() as c:
            c.shutdown("restart")
        core.join()

    with core_in_thread(home, gateway=options) as again:

        async def still_owner() -> WsClient:
            c = await WsClient.open(port, cookie=cookie)
            assert (await c.connect())["trust"] == "owner"
            return c

        open_console = trio.run(still_owner)
        said = _console_json(home, capsys, "--revoke", "--reason", "lost laptop")
        assert said == {"ok": True, "revoked": True, "gateway_restarted": True}

        async def ended() -> None:
            # The open console dropped with the restarted gateway...
            assert isinstance(await _until_closed(open_console), Closed)
            # ...and its cookie no longer logs in.
            refused = await _refused(port, cookie)
            assert (refused.code, SESSION_ENDED in refused.reason) == (401, True)
            fresh = await owner_client(port, core_codes(home))
            assert (await fresh.connect())["trust"] == "owner"
            await fresh.aclose()

        trio.run(ended)
        with again.client() as c:
            said_in_ledger = [e.description for e in c.history(20).entries]
        assert "console: every WebChat login revoked by owner: lost laptop" in said_in_ledger


def test_the_login_endpoints_refuse_what_is_not_a_login(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        port = gw.port
        status, _, answer = await http(port, "GET", "/session")
        assert (status, json.loads(answer)["error"]) == (401, NOT_LOGGED_IN)
        assert (await http(port, "GET", "/login"))[0] == 405
        plain = {"Content-Type": "text/plain"}
        assert (await http(port, "POST", "/login", body=b"{}", headers=plain))[0] == 415
        as_json = {"Content-Type": "application/json"}
        assert (await http(port, "POST", "/login", body=b"not json", headers=as_json))[0] == 400
        big = b'{"code": "' + b"a" * 2000 + b'"}'
        assert (await http(port, "POST", "/login", body=big, headers=as_json))[0] == 413
        # A page elsewhere cannot log the owner's browser in (login CSRF).
        foreign, answer2 = await login(port, core.login_code(), origin="http://evil.example")
        assert (foreign, "cookie" in answer2) == (403, False)
        assert (await login(port, "never-issued-code-xyz"))[0] == 403
        # A code is spent by its first use whatever the verdict, and a
        # session credential is checked at every upgrade.
        cookie = await owner_cookie(port, core.login_code)
        status, _, answer = await http(port, "GET", "/session", headers={"Cookie": cookie})
        assert (status, json.loads(answer)) == (200, {"owner": True})
        status, found, _ = await http(port, "POST", "/logout", body=b"")
        assert status == 200
        assert found["set-cookie"].startswith(f"naga_owner_{port}=;")
        assert "Max-Age=0" in found["set-cookie"]
        # Another port's cookie is another instance's login.
        other = cookie.replace(f"naga_owner_{port}=", "naga_owner_1=")
        assert (await _refused(port, other)).code == 401

    run_gateway(socket, body)
