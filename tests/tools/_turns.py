"""Turns whose model (the fake server) issues scripted tool calls."""

from __future__ import annotations

import json
import queue
import threading
import uuid
from collections.abc import Iterator

from naga.sdk import Client
from naga.v1 import turn_pb2 as tpb
from tests.fakes.model_server import Reply
from tests.tools.conftest import ToolsCore

Call = tuple[str, dict[str, object]]


def model_name(tool: str) -> str:
    return tool.replace(".", "__")


def tool_turn(
    tc: ToolsCore, client: Client, session: str, calls: list[Call], reply: str = "done"
) -> list[tpb.TurnEvent]:
    """One turn: the model asks for ``calls`` in one step, then answers."""
    tc.model.script(
        Reply.answer(
            tool_calls=tuple(
                (f"c{i}", model_name(tool), json.dumps(args))
                for i, (tool, args) in enumerate(calls)
            )
        ),
        Reply.answer(reply),
    )
    events = list(client.run_turn(session, "go", uuid.uuid4().hex, timeout=120))
    assert events[-1].WhichOneof("kind") == "final", events[-1]
    return events


def results(events: list[tpb.TurnEvent]) -> list[tpb.ToolCallFinished]:
    return [e.tool_finished for e in events if e.WhichOneof("kind") == "tool_finished"]


def last_seq(client: Client) -> int:
    return client.history(limit=1).entries[0].seq


class TurnInThread:
    """A turn run on another thread, its events readable as they come, so a
    test can act while the turn waits (an approval)."""

    def __init__(
        self, tc: ToolsCore, client: Client, session: str, calls: list[Call], *, peer: str = ""
    ) -> None:
        tc.model.script(
            Reply.answer(
                tool_calls=tuple(
                    (f"c{i}", model_name(tool), json.dumps(args))
                    for i, (tool, args) in enumerate(calls)
                )
            ),
            Reply.answer("done"),
        )
        self.events: queue.Queue[tpb.TurnEvent | None] = queue.Queue()
        self.seen: list[tpb.TurnEvent] = []
        stream = client.run_turn(session, "go", uuid.uuid4().hex, peer=peer, timeout=120)
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: Iterator[tpb.TurnEvent]) -> None:
        try:
            for event in stream:
                self.events.put(event)
        finally:
            self.events.put(None)

    def until(self, kind: str) -> tpb.TurnEvent:
        """The next event of ``kind`` (the turn's readiness, not a timer)."""
        while True:
            event = self.events.get(timeout=120)
            assert event is not None, f"the turn ended before a {kind} event: {self.seen}"
            self.seen.append(event)
            if event.WhichOneof("kind") == kind:
                return event

    def finish(self) -> list[tpb.TurnEvent]:
        while (event := self.events.get(timeout=120)) is not None:
            self.seen.append(event)
        self._thread.join(10)
        assert self.seen[-1].WhichOneof("kind") == "final", self.seen[-1]
        return self.seen
