"""The console when the core (and with it its gateway) goes away, in real
headless Chromium at 1280x800 and 390x844: a banner says so, Send turns
into Queue, a message typed meanwhile says it "will send when
reconnected", and once a new core serves on the same port the console
reconnects by itself and the message is sent (once) and answered."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from naga.sdk import Client
from tests.agent.conftest import ServerThread, model_server, write_providers
from tests.daemon.conftest import start_core_process
from tests.fakes.model_server import Reply
from tests.gateway import _console as c

__all__ = ["model_server"]  # the fixture, used by name

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("size", sorted(c.SIZES))
def test_a_lost_core_is_said_and_a_message_waits_for_it(
    size: str, tmp_path: Path, model_server: ServerThread
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    write_providers(str(home), model_server.server.openai_url)
    port = c.free_port()
    first = start_core_process(str(home), tmp_path / "core1.log", gateway_port=port)
    again = None
    try:
        with c.browser(c.SIZES[size]) as d:
            c.open_console(d, port, f"/#s=conn-{size}", home=str(home))
            assert not d.find_element("id", "banner").is_displayed()
            os.kill(first.pid, signal.SIGTERM)
            assert first.proc.wait(60) == 0, first.output()[-2000:]
            c.wait(d, "the banner", lambda _: d.find_element("id", "banner").is_displayed())
            (banner,) = c.texts(d, "#banner")
            assert banner.startswith("The gateway is not reachable"), banner
            assert "naga daemon start" in banner
            assert d.find_element("id", "conn").get_attribute("data-state") == "closed"
            assert c.texts(d, "#conn") == ["offline"]
            assert c.texts(d, "#send") == ["Queue"]
            assert d.find_element("id", "queued-note").is_displayed()
            c.type_and_send(d, "sent while away")
            assert c.texts(d, "#messages li.pending .state") == ["will send when reconnected"]
            c.shoot(d, tmp_path, f"connection-lost-{size}")

            model_server.script(Reply.answer("back and answered"))
            again = start_core_process(str(home), tmp_path / "core2.log", gateway_port=port)
            c.wait(d, "the reconnect", lambda _: c.ready(d), timeout=60)
            c.wait(
                d,
                "the queued message's answer",
                lambda _: (
                    c.texts(d, "#messages li .bubble") == ["sent while away", "back and answered"]
                ),
                timeout=60,
            )
            assert not d.find_element("id", "banner").is_displayed()
            assert c.texts(d, "#send") == ["Send"]
            assert c.texts(d, "#messages li.pending") == []
            c.shoot(d, tmp_path, f"connection-back-{size}")
        with Client.connect(str(home)) as client:
            texts = [e.text for e in client.session_history(f"conn-{size}")]
        assert texts == ["sent while away", "back and answered"], "sent once, answered once"
    finally:
        for proc in (first, again):
            if proc is not None and proc.proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                proc.proc.wait(60)
