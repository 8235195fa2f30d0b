"""The bounds on streamed text in the core: a call's progress past its
limits is dropped (never buffered), and a running turn coalesces the deltas
no stream has read yet into one event, in order with the other events."""

from __future__ import annotations

import trio
import trio.testing

from naga.constants import PLUGIN_MAX_PROGRESS_BYTES, PLUGIN_MAX_PROGRESS_FRAMES
from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import turn_pb2 as tpb
from naga_core.agent._turn import Running, TurnCursor
from naga_core.plugins._session import Pending


def test_progress_past_the_byte_bound_is_dropped() -> None:
    got: list[str] = []
    pending = Pending("provider.complete", got.append)
    piece = "x" * (PLUGIN_MAX_PROGRESS_BYTES // 4)
    for _ in range(6):
        pending.progress(piece)
    assert got == [piece] * 4
    assert pending.progress_dropped == 2
    pending.progress("é")  # two bytes: past the bound too
    assert len(got) == 4


def test_progress_past_the_frame_bound_is_dropped() -> None:
    got: list[str] = []
    pending = Pending("provider.complete", got.append)
    for _ in range(PLUGIN_MAX_PROGRESS_FRAMES + 3):
        pending.progress("a")
    assert len(got) == PLUGIN_MAX_PROGRESS_FRAMES
    assert pending.progress_dropped == 3


def test_progress_without_a_taker_is_dropped() -> None:
    pending = Pending("notes.write")
    pending.progress("hello")
    assert (pending.progress_frames, pending.progress_dropped) == (0, 1)


def _running() -> Running:
    return Running(
        turn_id="t-1", session="s", key="k", peer="", trust=TrustLevel.OWNER, risk=Risk.R4
    )


def _kinds(events: list[tpb.TurnEvent]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for e in events:
        kind = e.WhichOneof("kind") or ""
        out.append((kind, e.delta.text if kind == "delta" else ""))
    return out


def test_unread_deltas_become_one_event_in_order() -> None:
    async def main() -> None:
        running = _running()
        cursor = TurnCursor(running)
        running.emit(tpb.TurnEvent(accepted=tpb.TurnAccepted(turn_id="t-1")))
        for text in ["Hel", "lo", " "]:
            running.delta(text)
        first = await cursor.next()
        assert first is not None
        assert _kinds(list(first)) == [("accepted", ""), ("delta", "Hello ")]
        running.delta("wor")
        running.delta("ld")
        running.emit(tpb.TurnEvent(final=tpb.TurnFinal(text="Hello world")))
        running.delta("late")  # nothing after the end
        running.end()
        second = await cursor.next()
        assert second is not None
        assert _kinds(list(second)) == [("delta", "world"), ("final", "")]
        assert await cursor.next() is None
        assert [e.index for e in running.events] == [0, 1, 2, 3]

    trio.run(main)


def test_a_waiting_reader_gets_each_delta_as_it_comes() -> None:
    async def main() -> None:
        running = _running()
        cursor = TurnCursor(running)
        seen: list[str] = []
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                while (batch := await cursor.next()) is not None:
                    seen.extend(e.delta.text for e in batch)

            nursery.start_soon(read)
            for text in ["a", "b", "c"]:
                await trio.testing.wait_all_tasks_blocked()
                running.delta(text)
            await trio.testing.wait_all_tasks_blocked()
            running.end()
        assert seen == ["a", "b", "c"]

    trio.run(main)
