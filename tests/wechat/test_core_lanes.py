"""WeChat turns are admitted by the core's lanes (ADR 0039, ADR 0028): a
message for a session whose turn runs (a console turn in the same
session, its model call held) is recorded in the core at once, queued in
the core's lane behind it, and runs and is answered when it ends; two
messages in a row keep their order in the session and on the wire."""

from __future__ import annotations

import threading

import trio

from naga.v1 import turn_pb2 as tpb
from naga_core.wechat import session_of
from tests.fakes.model_server import Reply
from tests.wechat.conftest import World, say

USER = "lanes-user@im.wechat"


def _held(world: World, name: str) -> None:
    async def wait() -> None:
        with trio.fail_after(60):
            await world.model.server.held(name)

    trio.from_thread.run(wait, trio_token=world.model.token)


def test_a_message_behind_a_running_turn_is_recorded_then_queued_in_the_core(
    world: World,
) -> None:
    binding = world.active(USER)
    session = session_of(binding.bot_id, USER)
    world.model.script(
        Reply.answer("console done", hold="lane"), Reply.answer("w1"), Reply.answer("w2")
    )
    events: list[tpb.TurnEvent] = []

    def console() -> None:
        events.extend(
            world.client.run_turn(session, "from the console", "lane-console", timeout=60)
        )

    thread = threading.Thread(target=console)
    thread.start()
    _held(world, "lane")
    before = len(world.ilink.server.texts_to(USER))
    say(world, binding.bot_id, USER, "first while busy")
    say(world, binding.bot_id, USER, "second while busy")

    def recorded() -> list[str]:
        texts = [e.text for e in world.client.session_history(session)]
        return texts if "second while busy" in texts else []

    # Both recorded by the core while the console's turn still runs.
    texts = world.until(recorded)
    assert texts.index("first while busy") < texts.index("second while busy")
    assert "console done" not in texts
    assert world.ilink.server.texts_to(USER)[before:] == []
    world.model.run(lambda: world.model.server.release("lane"))
    thread.join(60)
    assert events[-1].HasField("final")
    got = world.ilink.until(
        lambda s: s.texts_to(USER)[before:] if len(s.texts_to(USER)) >= before + 2 else None
    )
    assert got == ["w1", "w2"]
    history = [e.text for e in world.client.session_history(session)]
    assert history.index("console done") < history.index("w1") < history.index("w2")
