"""Provider failures: each gives the user a clear message (a TurnError of
kind MODEL) and leaves the session usable: the next turn works. The
provider plugin retries twice (conftest) and counts 1 s without a byte as
a stall."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

import pytest

from naga.sdk import Client
from naga.v1 import turn_pb2 as tpb
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import AGENT, TUNING, ServerThread, error, final, turn, write_providers
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply

CASES = {
    "401": (
        (Reply.error(401, "Incorrect API key provided", error_type="invalid_api_key"),),
        "HTTP 401: Incorrect API key provided); check api_key in providers.json",
    ),
    "500": (
        tuple(Reply.error(500, "upstream exploded") for _ in range(3)),
        "failed (HTTP 500: upstream exploded); gave up after 3 attempts",
    ),
    "malformed": (
        (Reply.raw(b"<html>not json</html>", content_type="text/html"),),
        "sent a malformed answer: the body is not JSON",
    ),
    "cut": ((Reply.cut("Hello there, this is cut", after_events=2),), "the answer was cut"),
    "stall": ((Reply.stall(),), "sent no answer for 1 s (the read timeout)"),
    # The embedded model, after eight failed tool calls: the model's doing,
    # not "internal" (which says Naga failed).
    "empty": ((Reply.answer(""),), "the model answered with no text"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_provider_failure_is_a_clear_turn_error_and_the_session_goes_on(
    client: Client, model_server: ServerThread, case: str
) -> None:
    replies, mention = CASES[case]
    model_server.script(*replies)
    session = f"s-fail-{case}"
    failed = error(turn(client, session, "hello"))
    assert failed.kind == tpb.TURN_ERROR_KIND_MODEL
    assert mention in failed.message
    assert "sk-test" not in failed.message
    assert model_server.run(lambda: model_server.server.pending) == 0
    model_server.script(Reply.answer("back again"))
    assert final(turn(client, session, "still there?")).text == "back again"


def test_rate_limited_then_answered(client: Client, model_server: ServerThread) -> None:
    model_server.script(
        Reply.error(429, "slow down", headers=(("retry-after", "0"),)), Reply.answer("finally")
    )
    assert final(turn(client, "s-429", "hello")).text == "finally"


def test_a_refused_connection_is_a_clear_turn_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = tempfile.mkdtemp(prefix="naga-r-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, f"http://127.0.0.1:{port}/v1")
    try:
        with core_in_thread(home, plugins=PluginsConfig(tuning=TUNING), agent=AGENT) as core:
            with core.client() as c:
                failed = error(turn(c, "s-refused", "hello"))
                assert failed.kind == tpb.TURN_ERROR_KIND_MODEL
                assert "connect" in failed.message.lower()
                c.shutdown("done")
            assert not core.join().failed
    finally:
        shutil.rmtree(root, ignore_errors=True)
