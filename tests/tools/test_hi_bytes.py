"""What "hi" costs on the wire to the model through the real core as a fresh
install runs it (the shipped tools enabled, offered up to tools.max_risk,
the agent's whole system prompt): at most 6 KB (issue 14), as the fake
provider on loopback received it."""

from __future__ import annotations

import uuid

from tests.fakes.model_server import Reply
from tests.tools.conftest import ToolsCore

#: The issue's ceiling for "hi" with the default tools.
HI_MAX_BYTES = 6 * 1024


def test_hi_with_the_default_tools_fits_in_6_kb(tools_core: ToolsCore) -> None:
    server = tools_core.model.server
    tools_core.model.script(Reply.answer("hello"))
    before = len(server.requests)
    with tools_core.client() as c:
        events = list(c.run_turn("hi-bytes", "hi", uuid.uuid4().hex, timeout=120))
    assert events[-1].WhichOneof("kind") == "final", events[-1]
    (request,) = server.requests[before:]
    offered = sorted(t["function"]["name"] for t in request.json().get("tools", []))
    # The shipped tools a fresh install offers (R2 and below), all of them.
    assert {"fs__read", "fs__list", "fs__search", "fs__write", "fs__edit", "web__fetch"} <= set(
        offered
    ), offered
    assert request.wire_bytes <= HI_MAX_BYTES, (request.wire_bytes, offered)
