"""The console's frame in real headless Chromium against a real core (only
the model is a fake), at 1280x800 and 390x844: sessions that switch right
with previews and times, every page (settings, model, plugins and tools,
trust, ledger, undo with its preview in words), nothing wider than a
phone's viewport, and axe-core finding no critical violation in the main
views. Screenshots go to the test's output directory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.v1 import core_pb2 as cpb
from tests.agent.conftest import ServerThread, model_server
from tests.fakes.model_server import Reply
from tests.gateway import _console as c

__all__ = ["model_server"]  # the fixture, used by name

pytestmark = pytest.mark.slow
PAGES = (
    "settings",
    "model",
    "plugins",
    "sessions",
    "logs",
    "wechat",
    "skills",
    "trust",
    "ledger",
    "rollback",
)


@pytest.fixture(scope="module")
def core(
    tmp_path_factory: pytest.TempPathFactory, model_server: ServerThread
) -> Iterator[c.RealCore]:
    with c.real_core(tmp_path_factory.mktemp("console-frame"), model_server) as core:
        with Client.connect(core.home) as client:
            client.enable_plugin("clock", wait=20.0)
        yield core


def _bubbles(d: Any) -> list[str]:
    return c.texts(d, "#messages li .bubble")


def _new_session(d: Any, name: str) -> None:
    if d.find_element("id", "menu").is_displayed():
        d.find_element("id", "menu").click()
    box = d.find_element("id", "new-name")
    box.send_keys(name)
    d.find_element("css selector", "#new-session button").click()


@pytest.mark.parametrize("size", sorted(c.SIZES))
def test_sessions_switch_show_previews_and_times(
    size: str, core: c.RealCore, tmp_path: Path
) -> None:
    a, b = f"a-{size}", f"b-{size}"
    core.model.script(Reply.answer("answer in A"), Reply.answer("answer in B"))
    with c.browser(c.SIZES[size]) as d:
        c.open_console(d, core.port, f"/#s={a}", home=core.home)
        c.type_and_send(d, "first in A")
        c.wait(d, "A's answer", lambda _: _bubbles(d) == ["first in A", "answer in A"])
        _new_session(d, b)
        # At once: the new session is shown, empty, and marked current.
        c.wait(d, "the empty new session", lambda _: _bubbles(d) == [])
        current = c.texts(d, '#sessions button[aria-current="true"] .name')
        assert current == [b]
        c.type_and_send(d, "first in B")
        c.wait(d, "B's answer", lambda _: _bubbles(d) == ["first in B", "answer in B"])
        if d.find_element("id", "menu").is_displayed():
            d.find_element("id", "menu").click()
        c.wait(
            d,
            "B's preview",
            lambda _: any(
                re.fullmatch(r"just now · first in B", t)
                for t in c.texts(d, f'#sessions button[data-session="{b}"] .sub')
            ),
        )
        c.shoot(d, tmp_path, f"sessions-{size}")
        d.find_element("css selector", f'#sessions button[data-session="{a}"]').click()
        c.wait(d, "A again", lambda _: _bubbles(d) == ["first in A", "answer in A"])
        assert c.texts(d, '#sessions button[aria-current="true"] .name') == [a]


@pytest.mark.parametrize("size", sorted(c.SIZES))
def test_every_page_shows_the_core_as_it_is(size: str, core: c.RealCore, tmp_path: Path) -> None:
    peer = f"wechat:erin-{size}"
    with Client.connect(core.home) as client:
        client.set_trust(peer, cpb.TRUST_LEVEL_KNOWN, by_owner=True, reason="a friend")
        kept = client.history(1).entries[0].seq - 1
    with c.browser(c.SIZES[size]) as d:
        c.open_console(d, core.port, f"/#s=pages-{size}", home=core.home)
        c.show_page(d, "settings")
        rows = c.js(
            d,
            "return [...document.querySelectorAll('#page-settings tbody tr')].map("
            "(r) => [...r.cells].map((x) => x.textContent))",
        )
        steps = next(r for r in rows if r[0] == "agent.max_steps")
        assert steps[1] == "25 default"
        assert steps[2] == "integer: an integer in 1..100"
        c.shoot(d, tmp_path, f"page-settings-{size}")

        c.show_page(d, "model")
        (card,) = c.texts(d, "#page-model .card p:first-child")
        assert card == "Provider in use: fake"
        c.shoot(d, tmp_path, f"page-model-{size}")

        c.show_page(d, "plugins")
        (clock,) = c.texts(d, '#page-plugins [data-plugin="clock"]')
        assert "running" in clock
        assert "clock.now" in clock
        assert "R0 read-only" in clock
        c.shoot(d, tmp_path, f"page-plugins-{size}")

        c.show_page(d, "trust")
        assert [peer, "known"] in c.js(
            d,
            "return [...document.querySelectorAll('#page-trust tbody tr')].map("
            "(r) => [...r.cells].slice(0, 2).map((x) => x.textContent))",
        )
        c.shoot(d, tmp_path, f"page-trust-{size}")

        c.show_page(d, "ledger")
        box = d.find_element("css selector", "#page-ledger input[type=search]")
        box.send_keys("trust")
        shown = c.texts(d, "#page-ledger tbody tr")
        assert shown
        assert all("trust" in t.lower() for t in shown), shown
        c.shoot(d, tmp_path, f"page-ledger-{size}")

        c.show_page(d, "rollback")
        c.click(d, f'#page-rollback button.undo[data-seq="{kept}"]')
        c.wait(d, "the preview", lambda _: c.texts(d, "#preview-changes li"))
        assert c.texts(d, "#preview-changes li") == [f"remove {peer} from the trust table"]
        assert c.texts(d, "#preview-summary") == [
            f"This undoes 1 effect (#{kept + 1} to #{kept + 1}). The undo is itself a ledger entry."
        ]
        with Client.connect(core.home) as client:
            assert client.get_trust(peer).level == cpb.TRUST_LEVEL_KNOWN, "a preview changed it"
        c.shoot(d, tmp_path, f"page-rollback-preview-{size}")
        d.find_element("id", "confirm-undo").click()
        with Client.connect(core.home) as client:
            # The page was ready before the click: what tells the undo is
            # done is the core (the page re-renders after its answer).
            c.wait(
                d,
                "the undo at the core",
                lambda _: client.get_trust(peer).level == cpb.TRUST_LEVEL_UNTRUSTED,
            )
        c.wait(
            d, "the page after the undo", lambda _: c.texts(d, "#page-rollback .body[data-ready]")
        )


def _views(d: Any, core: c.RealCore, size: str) -> Iterator[str]:
    """Each main view in turn, with content in it; yields its name."""
    core.model.script(
        Reply.answer(tool_calls=(("call-v", "clock__now", "{}"),)),
        Reply.answer("A **reply** with `code`:\n\n```\n" + "x" * 300 + "\n```\n" + "long" * 80),
    )
    c.open_console(d, core.port, f"/#s=views-{size}", home=core.home)
    c.type_and_send(d, "a" * 200 + " time?")
    c.wait(d, "the reply", lambda _: c.texts(d, "#messages li.assistant.final"))
    yield "chat"
    if d.find_element("id", "menu").is_displayed():
        d.find_element("id", "menu").click()
        yield "menu"
        d.find_element("id", "menu").click()
    for page in PAGES:
        c.show_page(d, page)
        yield page
    c.click(d, "#page-rollback button.undo")
    c.wait(d, "the preview", lambda _: c.js(d, "return !!document.getElementById('preview')"))
    yield "rollback-preview"


def test_nothing_is_wider_than_a_phone(core: c.RealCore, tmp_path: Path) -> None:
    with c.browser(c.SIZES["phone"]) as d:
        for view in _views(d, core, "phone"):
            assert c.overflowing(d) == [], view
            c.shoot(d, tmp_path, f"phone-{view}")


@pytest.mark.parametrize("size", sorted(c.SIZES))
@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_axe_finds_no_critical_violation(
    size: str, dark: bool, core: c.RealCore, tmp_path: Path
) -> None:
    found: dict[str, list[dict[str, Any]]] = {}
    with c.browser(c.SIZES[size], dark=dark) as d:
        if dark:
            assert c.js(d, "return matchMedia('(prefers-color-scheme: dark)').matches")
        for view in _views(d, core, f"{size}-{'dark' if dark else 'light'}"):
            bad = [v for v in c.axe(d) if v["impact"] == "critical"]
            if bad:
                found[view] = bad
            if dark:
                c.shoot(d, tmp_path, f"dark-{view}-{size}")
    assert found == {}


def test_keyboard_shortcuts_and_focus_order(core: c.RealCore) -> None:
    keys = c.selenium("selenium.webdriver.common.keys").Keys
    chain = c.selenium("selenium.webdriver.common.action_chains").ActionChains
    gate = trio.Event()
    core.model.script(Reply.held("A long story begins", gate, pieces=4))
    with c.browser(c.SIZES["desktop"]) as d:
        c.open_console(d, core.port, "/#s=keys-a", home=core.home)
        # Focus follows the page's order: no tabindex reorders it, the skip
        # link comes first, and Tab from it goes to the side bar.
        assert c.js(d, "return document.querySelectorAll('[tabindex]').length") == 0
        first = (
            "return document.querySelector('a[href], button, input, textarea, select').className"
        )
        assert c.js(d, first) == "skip"
        c.js(d, "document.querySelector('.skip').focus()")
        chain(d).send_keys(keys.TAB).perform()
        assert c.js(d, "return document.activeElement.id") == "new-name"
        chain(d).key_down(keys.ALT).send_keys("n").key_up(keys.ALT).perform()
        assert c.js(d, "return document.activeElement.id") == "new-name"
        chain(d).send_keys("keys-b", keys.ENTER).perform()
        c.wait(
            d,
            "the new session",
            lambda _: c.texts(d, '#sessions button[aria-current="true"] .name') == ["keys-b"],
        )
        assert c.js(d, "return document.activeElement.id") == "text"
        c.show_page(d, "settings")
        d.find_element("css selector", "#page-settings h2").click()
        chain(d).send_keys("/").perform()
        c.wait(
            d,
            "the chat again",
            lambda _: not c.js(d, "return document.getElementById('page-chat').hidden"),
        )
        assert c.js(d, "return document.activeElement.id") == "text"
        c.type_and_send(d, "tell me")
        c.wait(
            d,
            "the reply to start",
            lambda _: any(t.startswith("A") for t in c.texts(d, "#messages li.assistant .md")),
        )
        c.wait(d, "Stop enabled", lambda _: d.find_element("id", "abort").is_enabled())
        chain(d).send_keys(keys.ESCAPE).perform()
        c.wait(
            d,
            "the stop",
            lambda _: (
                c.texts(d, "#messages li.error .turn-error") == ["Stopped before the reply ended."]
            ),
        )
        core.model.run(gate.set)
