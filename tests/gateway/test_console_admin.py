"""The owner's pages that change things, in real headless Chromium against a
real ``naga daemon start`` (its sandboxed gateway, the fake model): rename,
archive and unarchive a session (ledger entries; ``naga session list`` shows
the same), the core's log filtered and paged, a setting changed with its
rule's clear refusal, the provider switched, a plugin enabled after the
consent card and disabled; and a guest refused every one of them, by the
gateway and, with a forged login, by the core (docs/adr/0029-console-owner-changes.md)."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.tokens import CAPABILITY_SCHEME, Risk, TrustLevel
from naga.v1 import console_admin_pb2 as capb
from naga.v1 import core_pb2 as cpb
from naga.v1 import skills_pb2 as skpb
from naga.v1.status_pb2 import Refusal
from naga_core.cli import main as cli_main
from naga_gateway import Gateway, GatewayConfig, GrpcCore
from naga_gateway import _protocol as proto
from naga_gateway.errors import CoreCallFailed
from tests.agent.conftest import ServerThread, model_server
from tests.fakes.model_server import Recorded, Reply
from tests.gateway import _console as c
from tests.gateway._client import WsClient

__all__ = ["model_server"]  # the fixture, used by name

pytestmark = pytest.mark.slow

#: The owner's changes and owner pages of the protocol, with valid params.
ADMIN_METHODS: dict[str, dict[str, Any]] = {
    "session.rename": {"session": "main", "title": "x"},
    "session.archive": {"session": "main", "archived": True},
    "log": {},
    "setting.set": {"name": "agent.max_steps", "value": "7"},
    "plugin.enable": {"name": "clock", "enabled": True},
    "providers": {},
    "provider.default": {"name": "local"},
    "wechat.bind": {},
    "wechat.list": {},
    "plugin.preview": {"source": "/tmp/x"},
    "plugin.install": {"source": "/tmp/x", "code_hash": "0" * 64},
    "trust.set": {"peer": "webchat:amy", "level": "owner"},
    "memory": {},
    "memory.delete": {"id": "mi-" + "0" * 16},
    "skills": {},
    "skill.show": {"name": "csv-totals"},
    "skill.log": {"name": "csv-totals"},
}
#: The core's own check of the owner's login: (RPC, request with no
#: console session, response type), each sent with an empty and a forged one.
CORE_READS: list[tuple[str, Any, Any]] = [
    ("ReadLog", capb.ReadLogRequest(), capb.ReadLogResponse),
    ("ConsoleListMemory", capb.ConsoleListMemoryRequest(), capb.ConsoleListMemoryResponse),
    (
        "ConsoleDeleteMemory",
        capb.ConsoleDeleteMemoryRequest(id="mi-" + "0" * 16),
        capb.ConsoleDeleteMemoryResponse,
    ),
    ("ConsoleListSkills", capb.ConsoleListSkillsRequest(), skpb.ListSkillsResponse),
    (
        "ConsoleShowSkill",
        capb.ConsoleShowSkillRequest(show=skpb.ShowSkillRequest(name="csv-totals")),
        skpb.ShowSkillResponse,
    ),
    (
        "ConsoleSkillLog",
        capb.ConsoleSkillLogRequest(log=skpb.SkillLogRequest(name="csv-totals")),
        skpb.SkillLogResponse,
    ),
]
GREETER = Path(__file__).resolve().parents[1] / "plugin_host" / "plugins" / "greeter-1"


@pytest.fixture(scope="module")
def core(
    tmp_path_factory: pytest.TempPathFactory, model_server: ServerThread
) -> Iterator[c.RealCore]:
    with c.real_core(tmp_path_factory.mktemp("console-admin"), model_server) as core:
        # An archive's distillation runs in the core's background (ADR 0050):
        # answered here, it never takes a reply a later turn scripted.
        server = core.model.server
        core.model.run(lambda: setattr(server, "responder", _distillation))
        yield core
        core.model.run(lambda: setattr(server, "responder", None))


def _distillation(request: Recorded) -> Reply | None:
    if b"You distil long-term memories" in request.body:
        return Reply.answer('{"memories": []}')
    return None


def _turn(core: c.RealCore, session: str, text: str) -> None:
    core.model.script(Reply.answer("noted: " + text))
    with Client.connect(core.home) as client:
        events = list(client.run_turn(session, text, uuid.uuid4().hex, timeout=60))
    assert events[-1].WhichOneof("kind") == "final", events[-1]


def _cli(capsys: pytest.CaptureFixture[str], home: str, *args: str) -> Any:
    capsys.readouterr()
    assert cli_main([*args, "--home", home, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _status(d: Any, box: str) -> str:
    return str(
        c.js(d, f"const e = document.getElementById('{box}'); return e ? e.textContent : ''")
    )


def _descriptions(home: str, limit: int = 60) -> list[str]:
    with Client.connect(home) as client:
        return [e.description for e in client.history(limit).entries]


def _sidebar(d: Any) -> dict[str, str]:
    rows = c.js(
        d,
        "return [...document.querySelectorAll('#sessions button')]"
        ".map((b) => [b.dataset.session, b.querySelector('.name').textContent])",
    )
    return {k: v for k, v in rows}


def test_a_session_is_renamed_archived_and_back_and_the_cli_agrees(
    core: c.RealCore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _turn(core, "groceries", "buy milk")
    with c.browser(c.SIZES["desktop"]) as d:
        c.open_console(d, core.port, "/#s=main", home=core.home)
        c.wait(d, "the session in the side bar", lambda _: "groceries" in _sidebar(d))
        c.show_page(d, "sessions")
        box = d.find_element("css selector", 'form.rename[data-session="groceries"] input')
        box.send_keys("Shopping list")
        d.find_element("css selector", 'form.rename[data-session="groceries"] button').click()
        c.wait(
            d,
            "the rename's answer",
            lambda _: (
                "Renamed groceries to “Shopping list” (ledger entry #"
                in _status(d, "session-status")
            ),
        )
        c.wait(
            d,
            "the title in the side bar",
            lambda _: _sidebar(d).get("groceries") == "Shopping list",
        )
        c.shoot(d, tmp_path, "sessions-renamed")
        listed = _cli(capsys, core.home, "session", "list")
        (row,) = [r for r in listed["sessions"] if r["session"] == "groceries"]
        assert (row["title"], row["archived"]) == ("Shopping list", False)

        d.find_element("css selector", 'button.archive[data-session="groceries"]').click()
        c.wait(d, "the archive", lambda _: "Archived groceries" in _status(d, "session-status"))
        # Answered before its distillation's model call, and said so.
        assert "distilling its memories in the background" in _status(d, "session-status")
        c.wait(d, "the side bar without it", lambda _: "groceries" not in _sidebar(d))
        assert "groceries" not in {
            r["session"] for r in _cli(capsys, core.home, "session", "list")["sessions"]
        }
        every = _cli(capsys, core.home, "session", "list", "--all")["sessions"]
        assert [r["archived"] for r in every if r["session"] == "groceries"] == [True]
        # Shown archived on the page, and back with one click.
        tags = c.texts(
            d, "#page-sessions tbody tr:has(button.archive[data-session=groceries]) .tag"
        )
        assert tags == ["archived"]
        d.find_element("css selector", 'button.archive[data-session="groceries"]').click()
        c.wait(d, "the unarchive", lambda _: "Unarchived groceries" in _status(d, "session-status"))
        c.wait(d, "the side bar with it again", lambda _: "groceries" in _sidebar(d))
        # An empty title takes it away; the CLI renames too.
        assert _cli(capsys, core.home, "session", "rename", "groceries", "")["changed"] is True
        assert _cli(capsys, core.home, "session", "archive", "groceries")["changed"] is True
        assert _cli(capsys, core.home, "session", "unarchive", "groceries")["changed"] is True
    words = _descriptions(core.home)
    for said in (
        "rename session groceries to 'Shopping list'",
        "archive session groceries",
        "unarchive session groceries",
        "untitle session groceries",
    ):
        assert said in words, (said, words[:20])


def test_the_log_page_reads_the_cores_log_filtered(core: c.RealCore, tmp_path: Path) -> None:
    with c.browser(c.SIZES["desktop"]) as d:
        c.open_console(d, core.port, "/#s=main", home=core.home)
        c.show_page(d, "logs")
        c.wait(d, "log lines", lambda _: len(c.texts(d, "#log-lines tbody tr")) > 0)
        every = c.js(
            d,
            "return [...document.querySelectorAll('#log-lines tbody tr')]"
            ".map((r) => [...r.cells].map((x) => x.textContent))",
        )
        assert any("naga-core serving on" in r[4] for r in every), every[:5]
        numbers = [int(r[0].lstrip("#")) for r in every]
        assert numbers == sorted(numbers, reverse=True)  # newest first
        c.shoot(d, tmp_path, "logs-desktop")
        # One component only: every row is it (or below it).
        box = d.find_element("id", "log-component")
        box.send_keys("naga.core")
        d.find_element("css selector", "#log-filter button[type=submit]").click()
        c.wait(
            d,
            "the component filter",
            lambda _: (
                (rows := c.texts(d, "#log-lines tbody tr td:nth-child(4)"))
                and all(t == "naga.core" or t.startswith("naga.core.") for t in rows)
            ),
        )
        # Errors only: fewer lines, each an error (or the page says none match).
        sel = c.selenium("selenium.webdriver.support.ui").Select
        sel(d.find_element("id", "log-level")).select_by_value("error")
        c.wait(
            d,
            "the level filter",
            lambda _: (
                "No line matches." in c.texts(d, "#log-lines p")
                or all(
                    t in ("error", "critical")
                    for t in c.texts(d, "#log-lines tbody td:nth-child(3)")
                )
            ),
        )
        # A component that is not a logger name gets a clear word, not a request.
        box.clear()
        box.send_keys("no spaces allowed")
        d.find_element("css selector", "#log-filter button[type=submit]").click()
        c.wait(
            d,
            "the refusal",
            lambda _: "A component is a logger name" in _status(d, "log-status"),
        )


def test_a_setting_is_changed_checked_and_reset(core: c.RealCore, tmp_path: Path) -> None:
    with c.browser(c.SIZES["phone"]) as d:
        c.open_console(d, core.port, "/#s=main", home=core.home)
        c.show_page(d, "settings")
        sel = c.selenium("selenium.webdriver.support.ui").Select
        sel(d.find_element("id", "setting-name")).select_by_value("agent.max_steps")
        value = d.find_element("id", "setting-value")
        value.clear()
        value.send_keys("500")
        d.find_element("id", "setting-save").click()
        c.wait(
            d,
            "the rule's refusal",
            lambda _: (
                "setting agent.max_steps = 500 refused: must be an integer in 1..100"
                in _status(d, "setting-status")
            ),
        )
        assert "error-box" in str(d.find_element("id", "setting-status").get_attribute("class"))
        c.shoot(d, tmp_path, "setting-refused-phone")
        assert c.overflowing(d) == []
        value = d.find_element("id", "setting-value")
        value.clear()
        value.send_keys("30")
        d.find_element("id", "setting-save").click()
        c.wait(
            d,
            "the change",
            lambda _: "Set agent.max_steps = 30 (ledger entry #" in _status(d, "setting-status"),
        )
        with Client.connect(core.home) as client:
            assert client.get_setting("agent.max_steps").value.integer == 30
        row = c.js(
            d,
            "return [...document.querySelectorAll('#page-settings tbody tr')].map("
            "(r) => [...r.cells].map((x) => x.textContent))"
            ".find((r) => r[0] === 'agent.max_steps')",
        )
        assert row[1] == "30 set"
        sel(d.find_element("id", "setting-name")).select_by_value("agent.max_steps")
        d.find_element("id", "setting-reset").click()
        c.wait(
            d,
            "the reset",
            lambda _: "Reset agent.max_steps = 25" in _status(d, "setting-status"),
        )
    assert "set agent.max_steps" in " ".join(_descriptions(core.home))


def test_the_provider_is_listed_without_its_key_and_switched(core: c.RealCore) -> None:
    with c.browser(c.SIZES["desktop"]) as d:
        c.open_console(d, core.port, "/#s=main", home=core.home)
        c.show_page(d, "model")
        assert c.texts(d, "#provider-in-use") == ["Provider in use: fake"]
        page = str(c.js(d, "return document.getElementById('page-model').textContent"))
        assert "sk-test" not in page
        assert "127.0.0.1" in page
        d.find_element("id", "use-local").click()
        c.wait(
            d,
            "the switch",
            lambda _: "model calls now go to local" in _status(d, "provider-status"),
        )
        assert c.texts(d, "#provider-in-use") == ["Provider in use: the embedded local model"]
        d.find_element("id", "use-file-default").click()
        c.wait(
            d,
            "back to the file's default",
            lambda _: "model calls now go to fake" in _status(d, "provider-status"),
        )
        # A name that is not in providers.json: the core's clear refusal.
        refused = d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "Naga.rpc.request('provider.default', {name: 'nosuch'})"
            ".then(() => done('accepted'), (e) => done(e.message));"
        )
        assert "'nosuch' is not a provider of" in refused, refused
    with Client.connect(core.home) as client:
        assert client.get_setting("model.provider").value.text == ""


def test_a_plugin_is_enabled_after_its_consent_card_and_disabled(
    core: c.RealCore, tmp_path: Path
) -> None:
    with c.browser(c.SIZES["desktop"]) as d:
        c.open_console(d, core.port, "/#s=main", home=core.home)
        c.show_page(d, "plugins")
        card = '#page-plugins [data-plugin="clock"]'
        d.find_element("css selector", f"{card} button.toggle").click()
        consent = c.texts(d, f"{card} .consent li")
        assert "no network" in consent
        assert "tools: clock.now (R0 read-only)" in consent
        c.shoot(d, tmp_path, "plugin-consent")
        d.find_element("css selector", f"{card} button.confirm-enable").click()
        c.wait(
            d,
            "the enable",
            lambda _: "Enabled clock (now running)." in _status(d, "plugin-status"),
            timeout=60,
        )
        # What each may reach: the web tool the hosts of web.allowed_hosts
        # (any public host by default) on 80 and 443, the clock nothing.
        assert c.texts(d, '#page-plugins [data-plugin="web"] .egress') == ["Reaches: *:80, *:443"]
        assert c.texts(d, f"{card} .egress") == ["No network"]
        d.find_element("css selector", f'{card} button.toggle[data-enabled="true"]').click()
        c.wait(d, "the disable", lambda _: "Disabled clock" in _status(d, "plugin-status"))
    with Client.connect(core.home) as client:
        assert not next(p for p in client.plugins() if p.name == "clock").enabled


def test_a_plugin_is_installed_after_the_owner_saw_what_it_asks(
    core: c.RealCore, tmp_path: Path
) -> None:
    with c.browser(c.SIZES["desktop"]) as d:
        c.open_console(d, core.port, "/#s=main", home=core.home)
        c.show_page(d, "plugins")
        box = d.find_element("id", "install-source")
        box.send_keys("relative/path")
        d.find_element("css selector", "#install-form button").click()
        c.wait(
            d,
            "the page's refusal",
            lambda _: "absolute path" in " ".join(c.texts(d, "#install-consent .error-box")),
        )
        box.clear()
        box.send_keys(str(tmp_path / "nothing-here"))
        d.find_element("css selector", "#install-form button").click()
        c.wait(d, "the core's refusal", lambda _: c.texts(d, "#install-consent .error-box"))
        assert "nothing-here" in " ".join(c.texts(d, "#install-consent .error-box"))
        box.clear()
        box.send_keys(str(GREETER))
        d.find_element("css selector", "#install-form button").click()
        c.wait(d, "the consent card", lambda _: c.texts(d, "#install-consent li"))
        shown = c.texts(d, "#install-consent li")
        assert any(line.startswith("code: sha256 ") for line in shown), shown
        assert any(line.startswith("network: ") for line in shown), shown
        assert "null" not in str(
            c.js(d, "return document.getElementById('page-plugins').textContent")
        )
        c.shoot(d, tmp_path, "plugin-install-consent")
        d.find_element("id", "confirm-install").click()
        c.wait(
            d,
            "the install",
            lambda _: "Installed greeter " in _status(d, "plugin-status"),
            timeout=60,
        )
    assert any(w.startswith("install plugin greeter ") for w in _descriptions(core.home))


def _trust_rows(d: Any) -> dict[str, str]:
    rows = c.js(
        d,
        "return [...document.querySelectorAll('#page-trust tbody tr')]"
        ".filter((r) => r.querySelector('form.trust-row'))"
        ".map((r) => [r.cells[0].textContent, r.cells[1].textContent])",
    )
    return {k: v for k, v in rows}


def test_the_owner_changes_a_peers_trust_as_the_cli_does(
    core: c.RealCore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the real core: a peer the CLI set is listed with its level,
    changed from its row (with a reason), a new peer added, a bad id refused
    with the trust table's rule; each change is the CLI's effect (`naga
    trust show` agrees, the ledger says the same words) and undo reverts it."""
    _cli(capsys, core.home, "trust", "set", "wechat:bot/amy", "guest")
    for name, size in c.SIZES.items():
        with c.browser(size) as d:
            c.open_console(d, core.port, "/#s=main", home=core.home)
            c.show_page(d, "trust")
            assert _trust_rows(d).get("wechat:bot/amy") in ("guest", "known"), _trust_rows(d)
            c.shoot(d, tmp_path, f"trust-{name}")
            assert c.overflowing(d) == [], name
    with c.browser(c.SIZES["desktop"]) as d:
        c.open_console(d, core.port, "/#s=main", home=core.home)
        c.show_page(d, "trust")
        row = 'form.trust-row[data-peer="wechat:bot/amy"]'
        sel = c.selenium("selenium.webdriver.support.ui").Select
        sel(d.find_element("css selector", f"{row} select")).select_by_value("known")
        d.find_element("css selector", f"{row} input.reason").send_keys("met in person")
        d.find_element("css selector", f"{row} button").click()
        c.wait(
            d,
            "the change",
            lambda _: "Set wechat:bot/amy to known (ledger entry #" in _status(d, "trust-status"),
        )
        assert _trust_rows(d)["wechat:bot/amy"] == "known"
        shown = _cli(capsys, core.home, "trust", "show", "wechat:bot/amy")
        assert shown["entries"] == [{"peer": "wechat:bot/amy", "level": "known", "explicit": True}]
        words = _descriptions(core.home, 10)
        assert any("wechat:bot/amy" in w and "met in person" in w for w in words), words
        # The same level again: nothing written, and the page says so.
        d.find_element("css selector", f"{row} button").click()
        c.wait(
            d,
            "the no-op",
            lambda _: "(unchanged: it already was so)" in _status(d, "trust-status"),
        )
        # A new peer from the form; then a bad id gets the table's rule.
        d.find_element("id", "trust-peer").send_keys("webchat:bob")
        sel(d.find_element("id", "trust-level")).select_by_value("guest")
        d.find_element("css selector", "#trust-form button").click()
        c.wait(d, "the new peer", lambda _: _trust_rows(d).get("webchat:bob") == "guest")
        said = _status(d, "trust-status")
        added = re.search(r"Set webchat:bob to guest \(ledger entry #(\d+);", said)
        assert added is not None, said
        d.find_element("id", "trust-peer").send_keys("no colon here")
        d.find_element("css selector", "#trust-form button").click()
        c.wait(
            d,
            "the refusal",
            lambda _: "is not <channel>:<id>" in _status(d, "trust-status"),
        )
        said = _status(d, "trust-status")
        # The core's words, without the RPC's name or the gRPC status.
        assert said.startswith("Not done: peer id 'no colon here' is not <channel>:<id>"), said
        assert "INVALID_ARGUMENT" not in said, said
        assert "SetTrust" not in said, said
        assert "Traceback" not in said, said
        assert "pydantic" not in said, said
        assert "error-box" in str(d.find_element("id", "trust-status").get_attribute("class"))
        c.shoot(d, tmp_path, "trust-refused")
    # Undo reverts the console's change as it does the CLI's.
    with Client.connect(core.home) as client:
        client.rollback(int(added[1]) - 1)
        assert not client.get_trust("webchat:bob").explicit
        assert client.get_trust("wechat:bot/amy").level == cpb.TRUST_LEVEL_KNOWN


def test_a_guest_is_refused_every_owner_change(core: c.RealCore) -> None:
    """A guest peer on a gateway that admits guests, against the real core:
    the gateway refuses each method; a forged owner login sent straight to
    the core with the gateway's token is refused there too."""
    with Client.connect(core.home) as owner:
        token = owner.mint("gateway", trust=TrustLevel.OWNER, risk=Risk.R4).token
    authorization = f"{CAPABILITY_SCHEME} {base64.b64encode(token.to_bytes()).decode()}"
    socket = str(Path(core.home, "run", "core.sock"))
    assert set(ADMIN_METHODS) <= set(proto.METHODS)

    async def main() -> None:
        grpc_core = GrpcCore(socket, authorization)
        gateway = Gateway(grpc_core, GatewayConfig(port=0, admit_guests=True))
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(gateway.serve)
                ws = await WsClient.open(gateway.port)
                hello = await ws.connect(name="amy")
                assert hello["trust"] in ("guest", "untrusted")
                for method, params in ADMIN_METHODS.items():
                    res = await ws.request(method, **params)
                    assert res["ok"] is False, (method, res)
                    assert res["error"]["code"] == "forbidden", (method, res)
                    assert res["error"]["message"].startswith("peer webchat:amy may not "), res
                await ws.aclose()
                for method, request, response in CORE_READS:
                    for bad in ("", "v1.forged.session"):
                        request.console_session = bad
                        with pytest.raises(CoreCallFailed) as info:
                            await grpc_core.admin(method, request, response)
                        assert info.value.code == "PERMISSION_DENIED", (method, info.value)
                        assert info.value.refusal == Refusal.REFUSAL_OWNER_REQUIRED
                nursery.cancel_scope.cancel()
        finally:
            grpc_core.close()

    trio.run(main)
    with Client.connect(core.home) as owner:
        assert owner.get_setting("agent.max_steps").value.integer == 25  # nothing changed
