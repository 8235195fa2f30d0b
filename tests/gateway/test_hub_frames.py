"""Event frames: an event shown to many peers is encoded once and numbered
per stream; every frame must still be exactly the JSON object the protocol
names (docs/protocol/websocket.md, "Events"), whatever the text holds."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from naga.policy import EventKind
from naga.trust import TrustLevel
from naga_gateway._hub import Hub, Peer

_texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


@given(texts=st.lists(_texts, min_size=1, max_size=5), session=_texts, streams=st.integers(1, 4))
def test_each_stream_gets_the_event_as_one_json_object_with_its_own_seq(
    texts: list[str], session: str, streams: int
) -> None:
    hub = Hub()
    opened = [hub.open(Peer(f"webchat:{n}", TrustLevel.OWNER), None)[0] for n in range(streams)]
    opened[0].push(EventKind.QUEUED.value, "other", {"key": "k", "position": 1})  # seqs differ
    for text in texts:
        hub.publish(EventKind.DELTA, session, frozenset({"webchat:0"}), {"text": text})
    for stream in opened:
        frames = [json.loads(raw) for _, raw in stream.since(0) or []]
        deltas = [f for f in frames if f["event"] == EventKind.DELTA.value]
        assert [f["data"] for f in deltas] == [{"text": t} for t in texts]
        assert all(set(f) == {"type", "seq", "event", "session", "data"} for f in frames)
        assert all(f["type"] == "event" and f["session"] == session for f in deltas)
        assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
