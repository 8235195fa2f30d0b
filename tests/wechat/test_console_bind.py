"""Binding WeChat from the console (issue 16), in real headless Chromium: a
real ``naga daemon start`` whose sandboxed WeChat plugin reaches the fake
iLink server over real HTTP on loopback through the core's egress proxy.
The page draws the login's QR code (segno's matrix, checked cell by cell
against the URL's), follows the login as the phone (the fake) scans, asks
for the verification number (a bad one is refused on the page), expires (a
new code) and confirms; the binding is then listed, as `naga wechat list`
lists it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import segno

from naga.sdk import Client
from naga.v1 import job_pb2 as jpb
from tests.agent.conftest import ServerThread, model_server
from tests.fakes.ilink import ILinkThread, ilink_thread
from tests.fakes.model_server import Reply
from tests.gateway import _console as c

__all__ = ["model_server"]  # the fixture, used by name

pytestmark = pytest.mark.slow

# Reads the canvas back: one 0/1 per module, at each cell's centre.
_CELLS_JS = """
const cv = document.getElementById('wechat-qr');
const n = arguments[0], quiet = 4, cell = cv.width / (n + 2 * quiet);
const g = cv.getContext('2d');
const rows = [];
for (let y = 0; y < n; y++) {
  let row = '';
  for (let x = 0; x < n; x++) {
    const px = g.getImageData((x + quiet + 0.5) * cell, (y + quiet + 0.5) * cell, 1, 1).data;
    row += px[0] < 128 ? '1' : '0';
  }
  rows.push(row);
}
return rows;
"""


@pytest.fixture(scope="module")
def ilink() -> Iterator[ILinkThread]:
    with ilink_thread(hold_s=1.0) as server:
        yield server


@pytest.fixture(scope="module")
def core(
    tmp_path_factory: pytest.TempPathFactory, model_server: ServerThread, ilink: ILinkThread
) -> Iterator[c.RealCore]:
    with c.real_core(tmp_path_factory.mktemp("console-wechat"), model_server) as core:
        with Client.connect(core.home) as client:
            client.set_setting_text("egress.loopback_hosts", "127.0.0.1")
            client.set_setting_text("wechat.api_base", ilink.server.base)
            client.set_setting_text("wechat.cdn_base", ilink.server.cdn)
        yield core


def _state(d: Any) -> str:
    return str(c.js(d, "return document.getElementById('wechat-state').textContent"))


def _status(d: Any) -> str:
    return str(c.js(d, "return document.getElementById('wechat-bind').dataset.status || ''"))


def _drawn_is(d: Any, url: str) -> bool:
    want = [
        "".join("1" if cell else "0" for cell in row) for row in segno.make(url, error="m").matrix
    ]
    return bool(c.js(d, "return !!document.getElementById('wechat-qr')")) and (
        c.js(d, _CELLS_JS, len(want)) == want
    )


def test_the_console_binds_wechat_through_the_qr_login(
    core: c.RealCore, ilink: ILinkThread, tmp_path: Path
) -> None:
    with c.browser(c.SIZES["phone"]) as d:
        c.open_console(d, core.port, "/#s=main", home=core.home)
        c.show_page(d, "wechat")
        assert c.texts(d, "#wechat-bindings p") == ["No WeChat account is bound yet."]
        d.find_element("id", "wechat-start").click()
        # Said at once, before WeChat's first answer (seconds on a real server).
        assert _state(d) in (
            "Asking WeChat for a login code…",
            "Waiting: scan the code with WeChat on your phone.",
        )
        c.wait(d, "the QR code", lambda _: _status(d) == "wait", timeout=60)
        first = ilink.run(ilink.server.qr)
        url = f"https://liteapp.weixin.qq.com/q/{first.code}"
        assert c.texts(d, "#wechat-url") == [url]
        c.wait(d, "the drawn code to be the URL's", lambda _: _drawn_is(d, url))
        assert _state(d) == "Waiting: scan the code with WeChat on your phone."
        c.shoot(d, tmp_path, "wechat-qr-phone")
        assert c.overflowing(d) == []

        ilink.run(ilink.server.scan, first.code)
        c.wait(d, "scanned", lambda _: _status(d) == "scaned")
        assert _state(d) == "Scanned: confirm the login on your phone."

        ilink.run(ilink.server.ask_code, first.code, "4711")
        c.wait(d, "the number asked", lambda _: _status(d) == "need_verifycode")
        box = d.find_element("id", "wechat-code")
        assert box.is_displayed()
        # Not digits: refused on the page, with what to type.
        d.execute_script("arguments[0].removeAttribute('pattern')", box)
        box.send_keys("12ab")
        d.find_element("css selector", "#wechat-code-form button").click()
        c.wait(
            d,
            "the page's refusal",
            lambda _: (
                c.texts(d, "#wechat-error")
                == ["Type the digits shown on the phone (1 to 16 digits)."]
            ),
        )
        box.clear()
        box.send_keys("4711")
        d.find_element("css selector", "#wechat-code-form button").click()
        c.wait(d, "scanned again (the number was right)", lambda _: _status(d) == "scaned")
        assert "4711" in ilink.run(lambda: ilink.server.qr(first.code).polls)

        ilink.run(ilink.server.expire, first.code)
        c.wait(d, "a new code", lambda _: _status(d) == "expired")
        second = ilink.run(ilink.server.qr)
        assert second.code != first.code
        fresh = f"https://liteapp.weixin.qq.com/q/{second.code}"
        c.wait(d, "the new code drawn", lambda _: _drawn_is(d, fresh))

        bot = ilink.run(ilink.server.confirm, second.code, "wx-owner")
        c.wait(d, "bound", lambda _: _status(d) == "confirmed", timeout=60)
        c.wait(
            d,
            "the binding listed",
            lambda _: any(bot.bot_id in t for t in c.texts(d, "#wechat-bindings tbody tr")),
        )
        assert _state(d) == f"Bound: bot {bot.bot_id} for WeChat user wx-owner."
        (row,) = c.texts(d, "#wechat-bindings tbody tr")
        assert "wx-owner" in row
        assert "active" in row
        c.shoot(d, tmp_path, "wechat-bound-phone")
    with Client.connect(core.home) as client:
        (bound,) = client.wechat_bindings()
        assert (bound.bot_id, bound.owner_user_id) == (bot.bot_id, "wx-owner")


def _bot_of(client: Client, ilink: ILinkThread, owner: str) -> str:
    """The binding of ``owner`` (made by the test above, or bound here)."""
    for b in client.wechat_bindings():
        if b.owner_user_id == owner:
            return b.bot_id
    started = client.wechat_bind()
    ilink.run(ilink.server.scan, started.login_id)
    ilink.run(ilink.server.confirm, started.login_id, owner)
    for _ in range(20):
        answer = client.wechat_bind(started.login_id, wait=5)
        if answer.status == "confirmed":
            return answer.binding.bot_id
    raise AssertionError("no confirmation")


def test_a_jobs_reply_wechat_did_not_carry_is_a_note_in_its_session_view(
    core: c.RealCore, ilink: ILinkThread, tmp_path: Path
) -> None:
    owner = "wx-owner"
    with Client.connect(core.home) as client:
        bot = _bot_of(client, ilink, owner)
        # To the binding's owner, who has not written yet: WeChat cannot
        # carry it (it sends only in reply to the user's messages).
        spec = jpb.JobSpec(
            cron="0 6 * * *",
            prompt="the early digest",
            channel=jpb.JOB_CHANNEL_WECHAT,
            deliver_to="wechat",
        )
        job = client.add_job(spec).job
        assert job.deliver_to == f"wechat:{bot}/{owner}"
        core.model.script(Reply.answer("Six o'clock: nothing new."))
        fire = client.run_job(job.id).fire
    with c.browser(c.SIZES["desktop"]) as d:
        c.open_console(d, core.port, f"/#s={fire.session}", home=core.home)
        note = c.wait(d, "the note", lambda _: c.texts(d, "#messages li.notice .turn-note"))
        assert note == [
            f"not delivered to wechat:{bot}/{owner}: this user has never written to the bot, "
            "and WeChat carries a message only in reply to one of theirs; it stays in the session"
        ]
        assert "Six o'clock: nothing new." in c.texts(d, "#messages li.assistant .md")
        # After the reply it is about.
        order = c.js(
            d,
            "return [...document.querySelectorAll('#messages li')].map((e) => e.className)",
        )
        notices = [i for i, k in enumerate(order) if "notice" in k]
        replies = [i for i, k in enumerate(order) if "assistant" in k]
        assert notices, order
        assert replies, order
        assert replies[-1] < notices[-1], order
        c.shoot(d, tmp_path, "job-note-desktop")
    assert not [s for s in ilink.server.sent if s.user == owner]
