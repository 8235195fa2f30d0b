"""A session recorded through the real core, its sandboxed executors and the
provider plugin against the fake model server. It is exported once through
the running core (and an unknown session asked for), then the core is
stopped and the tests export it from the ledger files."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from naga.v1 import turn_pb2 as tpb
from naga_core.cli import main as cli_main
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import (
    AGENT,
    PLUGINS,
    TUNING,
    ServerThread,
    error,
    final,
    model_server,
    turn,
    write_providers,
)
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply
from tests.plugin_host.conftest import READY_S

SESSION = "s-replay"
FAILING = "s-failing"
#: model_server is the agent tests' fixture, used here as it is.
__all__ = ["FAILING", "SESSION", "Recorded", "model_server", "recorded"]


@dataclass(frozen=True)
class Recorded:
    home: str
    #: `naga replay export` through the running core: what it said, and the bundle.
    online: dict[str, object]
    online_bundle: bytes
    #: What it said of a session the ledger has no trace of, core running.
    online_unknown: dict[str, object]
    #: The ledger's size when the core was asked to stop.
    size_at_stop: int


def _echo(call_id: str, text: str) -> tuple[str, str, str]:
    return (call_id, "danger__echo", json.dumps({"text": text}))


@pytest.fixture(scope="module")
def recorded(model_server: ServerThread) -> Iterator[Recorded]:
    root = tempfile.mkdtemp(prefix="naga-rp-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=TUNING)
    try:
        with core_in_thread(home, plugins=config, agent=AGENT) as core:
            with core.client() as c:
                c.enable_plugin("danger", wait=READY_S)
                # Turn 1: one tool call, then the answer.
                model_server.script(
                    Reply.answer(tool_calls=(_echo("call_1", "ping"),), usage=(20, 4)),
                    Reply.answer("The echo said ping.", usage=(30, 6)),
                )
                assert final(turn(c, SESSION, "echo ping please")).tool_calls == 1
                # Another session in between: not part of the bundle.
                model_server.script(Reply.answer("elsewhere"))
                final(turn(c, "s-other", "hello"))
                # Turn 2: two calls in one answer, a third after, then the answer
                # (the prompt carries turn 1 as history).
                model_server.script(
                    Reply.answer(tool_calls=(_echo("call_2", "a"), _echo("call_3", "b"))),
                    Reply.answer("one more", tool_calls=(_echo("call_4", "c"),)),
                    Reply.answer("Echoed a, b and c.", usage=(50, 9)),
                )
                done = final(turn(c, SESSION, "echo a, b, then c"))
                assert (done.model_calls, done.tool_calls) == (3, 3)
                # Turn 3: a plain answer.
                model_server.script(Reply.answer("Bye."))
                final(turn(c, SESSION, "thanks"))
                # A session whose turns end in errors the loop itself reports:
                # the provider refuses (401), then the budget runs out.
                model_server.script(Reply.error(401, "bad key"))
                assert error(turn(c, FAILING, "hi")).kind == tpb.TURN_ERROR_KIND_MODEL
                model_server.script(
                    Reply.answer(tool_calls=(_echo("call_b", "b"),), usage=(900, 200))
                )
                assert error(turn(c, FAILING, "spend")).kind == tpb.TURN_ERROR_KIND_BUDGET
            online_path = os.path.join(root, "online.bundle")
            online = _export_json(home, SESSION, online_path)
            unknown = _export_json(home, "s-never", os.path.join(root, "never.bundle"))
            with core.client() as c:
                size = c.head().size
                c.shutdown("recorded")
            assert not core.join().failed
        with open(online_path, "rb") as f:
            online_bundle = f.read()
        yield Recorded(home, online, online_bundle, unknown, size)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _export_json(home: str, session: str, out: str) -> dict[str, object]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli_main(["replay", "export", session, "-o", out, "--home", home, "--json"])
    data: dict[str, object] = json.loads(buf.getvalue())
    data["code"] = code
    return data
