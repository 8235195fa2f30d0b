"""The session list's preview (the last message of each session, what the
console's side bar shows) survives a core restart: found by hand, every
session read "no messages yet" after one until it was opened. Through a
real core process stopped and started again, and the fake model."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

from naga.sdk import Client
from tests.agent.conftest import ServerThread, final, turn, write_providers
from tests.daemon.conftest import start_core_process
from tests.fakes.model_server import Reply


def _previews(home: str) -> dict[str, str]:
    with Client.connect(home) as c:
        return {s.session: s.preview for s in c.sessions(limit=50)}


def test_previews_survive_a_restart(model_server: ServerThread) -> None:
    root = tempfile.mkdtemp(prefix="naga-t-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    log = Path(root) / "core.log"
    core = start_core_process(home, log)
    try:
        with Client.connect(home) as c:
            for session, text in (("first", "remember the milk"), ("second", "and the eggs")):
                model_server.script(Reply.answer("noted"))
                assert final(turn(c, session, text)).text == "noted"
        before = _previews(home)
        assert before == {"first": "remember the milk", "second": "and the eggs"}
        os.kill(core.pid, signal.SIGTERM)
        assert core.proc.wait(60) == 0, core.output()
        core = start_core_process(home, log)
        assert _previews(home) == before  # nothing opened either session since
    finally:
        if core.proc.poll() is None:
            os.kill(core.pid, signal.SIGTERM)
            core.proc.wait(60)
