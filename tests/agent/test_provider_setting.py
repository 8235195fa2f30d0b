"""``model.provider`` through a real core: two providers in providers.json,
each a fake model server answering differently; the setting switches
between them from the next turn on, an unknown name is a turn error naming
the setting and the known names, and a rollback of the setting switches
back."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from naga.v1 import turn_pb2 as tpb
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import AGENT, TUNING, ServerThread, error, final, turn
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import FakeModelServer, Reply


@pytest.fixture(scope="module")
def two_servers() -> Iterator[tuple[ServerThread, ServerThread]]:
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                box["one"] = await nursery.start(FakeModelServer().serve)
                box["two"] = await nursery.start(FakeModelServer().serve)
                box["token"] = trio.lowlevel.current_trio_token()
                box["scope"] = nursery.cancel_scope
                started.set()

        trio.run(main)

    thread = threading.Thread(target=run, name="fake-model-servers")
    thread.start()
    started.wait(10)
    try:
        yield ServerThread(box["one"], box["token"]), ServerThread(box["two"], box["token"])
    finally:
        trio.from_thread.run_sync(box["scope"].cancel, trio_token=box["token"])
        thread.join(10)


def _write(home: str, one: str, two: str) -> None:
    creds = os.path.join(home, "credentials")
    os.makedirs(creds, mode=0o700)
    entry = {"api": "openai", "api_key": "sk-test", "model": "fake-model"}
    body = {
        "default": "one",
        "providers": {"one": {**entry, "base_url": one}, "two": {**entry, "base_url": two}},
    }
    fd = os.open(os.path.join(creds, "providers.json"), os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(body, f)


def test_the_setting_switches_provider_for_the_next_turn_and_a_rollback_switches_back(
    two_servers: tuple[ServerThread, ServerThread],
) -> None:
    one, two = two_servers
    root = tempfile.mkdtemp(prefix="naga-p-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    _write(home, one.server.openai_url, two.server.openai_url)
    try:
        with core_in_thread(home, plugins=PluginsConfig(tuning=TUNING), agent=AGENT) as core:
            with core.client() as c:
                # Unset: providers.json's default.
                one.script(Reply.answer("from one"))
                assert final(turn(c, "s", "hi")).text == "from one"

                set_two = c.set_setting_text("model.provider", "two")
                two.script(Reply.answer("from two"))
                assert final(turn(c, "s", "and now?")).text == "from two"
                assert one.server.pending == 0
                assert two.server.pending == 0
                rows = {p.role for p in c.status().processes}
                assert "provider:two" in rows
                assert "provider:one" not in rows

                c.set_setting_text("model.provider", "nope")
                err = error(turn(c, "s", "still there?"))
                assert err.kind == tpb.TURN_ERROR_KIND_MODEL
                assert "model.provider = 'nope'" in err.message
                assert "known: local, one, two" in err.message
                assert not one.server.unexpected
                assert not two.server.unexpected

                # Back to before "two" was set: the default, "one", again.
                c.rollback(set_two.seq - 1, by_owner=True)
                assert c.get_setting("model.provider").explicit is False
                one.script(Reply.answer("one again"))
                assert final(turn(c, "s", "who is it?")).text == "one again"
                c.shutdown("test done")
            assert not core.join().failed
    finally:
        shutil.rmtree(root, ignore_errors=True)
