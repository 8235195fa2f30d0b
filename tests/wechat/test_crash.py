"""Crashes with messages in flight and queued: the WeChat plugin SIGKILLed,
then the core SIGKILLed and started again. Each inbound message is
answered exactly once (as the fake server records the sends: a part resent
after a crash carries the same client_id, which the server takes once),
and the cursor never skips a message (each one is a turn in the session)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from naga.sdk import Client
from naga_core.wechat import session_of
from tests.agent.conftest import ServerThread, model_server, write_providers
from tests.daemon.conftest import CoreProcess, start_core_process
from tests.fakes.ilink import ILinkThread, ilink_thread
from tests.fakes.model_server import Reply
from tests.ledger_helpers import verify_home

__all__ = ["model_server"]

USER = "u1@im.wechat"
OWNER = "owner@im.wechat"


def held(model: ServerThread, name: str) -> None:
    async def wait() -> None:
        with trio.fail_after(60):
            await model.server.held(name)

    trio.from_thread.run(wait, trio_token=model.token)


def configure(client: Client, ilink: ILinkThread) -> None:
    client.set_setting_text("egress.loopback_hosts", "127.0.0.1")
    client.set_setting_text("wechat.api_base", ilink.server.base)
    client.set_setting_text("wechat.cdn_base", ilink.server.cdn)


def bind(client: Client, ilink: ILinkThread, owner: str) -> str:
    started = client.wechat_bind()
    ilink.run(ilink.server.scan, started.login_id)
    ilink.run(ilink.server.confirm, started.login_id, owner)
    for _ in range(20):
        answer = client.wechat_bind(started.login_id, wait=5)
        if answer.status == "confirmed":
            return answer.binding.bot_id
    raise AssertionError("no confirmation")


def wechat_pid(client: Client) -> int:
    rows = [p for p in client.status().processes if p.role == "plugin:wechat" and p.pid]
    return rows[0].pid if rows else 0


@pytest.fixture
def root() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="naga-wc-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_sigkill_of_the_plugin_then_of_the_core_answers_each_message_once(
    model_server: ServerThread, root: str
) -> None:
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    log = Path(root, "core.log")
    with ilink_thread(hold_s=1.0) as ilink:
        server = ilink.server
        core: CoreProcess = start_core_process(home, log)
        try:
            with Client.connect(home) as client:
                configure(client, ilink)
                bot = bind(client, ilink, OWNER)
                # m1 in flight (its model call held), m2 and m3 queued behind it.
                model_server.script(
                    Reply.answer("r1", hold="h1"), Reply.answer("r2"), Reply.answer("r3")
                )
                for text in ("m1", "m2", "m3"):
                    ilink.run(server.user_says, bot, USER, text)
                held(model_server, "h1")
                pid = wechat_pid(client)
                assert pid > 0
                os.kill(pid, signal.SIGKILL)
                ilink.until(lambda s: s.bots[bot].polls > 0)
                model_server.run(lambda: model_server.server.release("h1"))
                ilink.until(lambda s: len(s.texts_to(USER)) >= 3, timeout=90)
                assert wechat_pid(client) not in (0, pid)
                # m4 in flight when the core dies, m5 queued.
                model_server.script(Reply.answer("lost", hold="h2"))
                ilink.run(server.user_says, bot, USER, "m4")
                held(model_server, "h2")
                ilink.run(server.user_says, bot, USER, "m5")
                ilink.until(lambda s: s.bots[bot].polls > 0)
            core.proc.send_signal(signal.SIGKILL)
            core.proc.wait(30)
            model_server.run(lambda: model_server.server.release("h2"))
            model_server.script(Reply.answer("r4"), Reply.answer("r5"))
            core = start_core_process(home, log)
            with Client.connect(home) as client:
                ilink.until(lambda s: len(s.texts_to(USER)) >= 5, timeout=120)
                history = client.session_history(session_of(bot, USER))
                client.shutdown("tests done")
            assert core.proc.wait(60) == 0
        finally:
            if core.proc.poll() is None:
                core.proc.kill()
                core.proc.wait()
        texts = server.texts_to(USER)
        client_ids = [s.client_id for s in server.sent if s.user == USER]
    assert texts == ["r1", "r2", "r3", "r4", "r5"], (texts, log.read_text()[-3000:])
    assert len(set(client_ids)) == len(client_ids)
    asked = [e.text for e in history if e.text in ("m1", "m2", "m3", "m4", "m5")]
    # m4's turn was cut by the crash and ran again: the message once per run.
    assert sorted(set(asked)) == ["m1", "m2", "m3", "m4", "m5"]
    assert asked.count("m1") == asked.count("m2") == asked.count("m3") == asked.count("m5") == 1
    verify_home(home)
