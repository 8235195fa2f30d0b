"""The plugin wire's framing and the supervisor's restart arithmetic,
as properties: frames survive any split of the byte stream, oversize
frames are refused on their header alone; backoff only grows within a
burst, never passes its cap, and exactly K failures within T give up."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga.plugin import FrameReader, decode_from_plugin, encode_frame
from naga.plugin.errors import FrameError
from naga.v1 import plugin_pb2 as pb
from naga_core.supervisor import RestartPolicy, RestartPolicyInvalid


def _result(call_id: int, text: str) -> pb.PluginToCore:
    return pb.PluginToCore(result=pb.Result(call_id=call_id, result_json=text))


def _pong(nonce: int) -> pb.PluginToCore:
    return pb.PluginToCore(pong=pb.Pong(nonce=nonce))


def _error(call_id: int, message: str) -> pb.PluginToCore:
    kind = pb.TOOL_ERROR_KIND_FAILED
    return pb.PluginToCore(error=pb.ToolError(call_id=call_id, kind=kind, message=message))


def _progress(call_id: int, text: str) -> pb.PluginToCore:
    return pb.PluginToCore(progress=pb.Progress(call_id=call_id, text=text))


_frames = st.one_of(
    st.builds(_result, st.integers(1, 2**64 - 1), st.text(max_size=300)),
    st.builds(_progress, st.integers(1, 2**64 - 1), st.text(min_size=1, max_size=50)),
    st.builds(_pong, st.integers(0, 2**64 - 1)),
    st.builds(_error, st.integers(1, 2**32), st.text(max_size=100)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_frames, max_size=8), st.data())
def test_frames_survive_any_split_of_the_stream(
    frames: list[pb.PluginToCore], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame(f) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader = FrameReader()
    out: list[pb.PluginToCore] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        reader.feed(stream[start:end])
        while (body := reader.next_body()) is not None:
            out.append(decode_from_plugin(body))
    assert out == frames
    assert reader.pending == 0


@given(st.integers(1025, 2**32 - 1))
def test_an_oversize_frame_is_refused_on_its_header(size: int) -> None:
    reader = FrameReader(limit=1024)
    with pytest.raises(FrameError, match=f"announces {size} bytes; the limit is 1024"):
        reader.feed(struct.pack(">I", size))


def test_a_frame_too_large_to_send_is_refused() -> None:
    big = pb.PluginToCore(result=pb.Result(call_id=1, result_json="x" * 2000))
    with pytest.raises(FrameError, match="exceeds the 1024-byte limit"):
        encode_frame(big, limit=1024)


@given(st.binary(max_size=64))
def test_garbage_bodies_decode_or_are_refused_never_crash(body: bytes) -> None:
    try:
        frame = decode_from_plugin(body)
    except FrameError:
        return
    assert frame.WhichOneof("frame") is not None


# --- restart policy --------------------------------------------------------------------

_policies = st.builds(
    RestartPolicy,
    backoff_s=st.floats(0.01, 5),
    backoff_max_s=st.floats(5, 60),
    loop_failures=st.integers(1, 10),
    loop_window_s=st.floats(1, 600),
)


@settings(max_examples=200, deadline=None)
@given(_policies, st.lists(st.floats(0, 1000), min_size=1, max_size=30))
def test_backoff_and_damping(policy: RestartPolicy, gaps: list[float]) -> None:
    history = policy.history()
    now = 0.0
    times: list[float] = []
    for gap in gaps:
        now += gap
        times.append(now)
        decision = history.failed(now)
        recent = [t for t in times if t > now - policy.loop_window_s]
        assert decision.failures == len(recent)
        assert decision.give_up == (len(recent) >= policy.loop_failures)
        if decision.give_up:
            return
        assert policy.backoff_s <= decision.delay_s <= policy.backoff_max_s
        expected = min(policy.backoff_s * 2 ** (len(recent) - 1), policy.backoff_max_s)
        assert decision.delay_s == pytest.approx(expected)


def test_failures_spread_wider_than_the_window_never_give_up() -> None:
    history = RestartPolicy(loop_failures=2, loop_window_s=10).history()
    for i in range(100):
        decision = history.failed(i * 10.0)
        assert not decision.give_up
        assert decision.delay_s == 0.25


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"backoff_s": 0}, "backoff_s must be a positive number"),
        ({"backoff_s": float("nan")}, "backoff_s must be a positive number"),
        ({"backoff_s": 10, "backoff_max_s": 1}, "backoff_max_s 1 is below backoff_s 10"),
        ({"loop_failures": 0}, "loop_failures must be at least 1"),
        ({"loop_window_s": -1}, "loop_window_s must be a positive number"),
    ],
)
def test_a_bad_policy_is_refused(kwargs: dict[str, float], said: str) -> None:
    with pytest.raises(RestartPolicyInvalid, match=said):
        RestartPolicy(**kwargs)  # type: ignore[arg-type]


def test_time_going_backwards_is_refused() -> None:
    history = RestartPolicy().history()
    history.failed(10)
    with pytest.raises(RestartPolicyInvalid, match="time went backwards"):
        history.failed(9)
