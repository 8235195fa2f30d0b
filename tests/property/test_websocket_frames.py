"""The gateway's RFC 6455 codec: whatever the split of the byte stream,
the reader sees the same events; encode then read is the identity; every
violation is refused with the close code the RFC names."""

from __future__ import annotations

import base64
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga_gateway import _ws as ws
from naga_gateway.errors import HandshakeRefused, WebSocketError

masks = st.binary(min_size=4, max_size=4)
texts = st.text(max_size=300)
blobs = st.binary(max_size=70_000)


@st.composite
def messages(draw: st.DrawFn) -> tuple[list[bytes], list[ws.Event]]:
    """A stream of client frames (masked, some fragmented, pings between
    fragments) and the events it must produce."""
    frames: list[bytes] = []
    expected: list[ws.Event] = []
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            data = draw(texts).encode()
            text = True
        else:
            data = draw(st.binary(max_size=2000)) if draw(st.booleans()) else draw(blobs)
            text = False
        cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=3)))
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        for i, part in enumerate(parts):
            op = (ws.OP_TEXT if text else ws.OP_BINARY) if i == 0 else ws.OP_CONTINUATION
            frames.append(ws.encode_frame(op, part, fin=i == len(parts) - 1, mask=draw(masks)))
            if i < len(parts) - 1 and draw(st.booleans()):
                ping = draw(st.binary(max_size=125))
                frames.append(ws.encode_frame(ws.OP_PING, ping, mask=draw(masks)))
                expected.append(ws.Ping(ping))
        expected.append(ws.Message(text, data))
    return frames, expected


@settings(max_examples=150, deadline=None)
@given(messages(), st.data())
def test_every_split_of_the_stream_gives_the_same_events(
    case: tuple[list[bytes], list[ws.Event]], data: st.DataObject
) -> None:
    frames, expected = case
    stream = b"".join(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    reader = ws.FrameReader(1 << 20)
    got: list[ws.Event] = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got.extend(reader.feed(stream[a:b]))
    assert got == expected


def test_byte_at_a_time() -> None:
    frame = ws.encode_frame(ws.OP_TEXT, "héllo".encode(), mask=b"abcd")
    reader = ws.FrameReader(100)
    got = [e for byte in frame for e in reader.feed(bytes([byte]))]
    assert got == [ws.Message(True, "héllo".encode())]


@given(st.binary(max_size=70_000))
def test_server_frames_read_back(payload: bytes) -> None:
    reader = ws.FrameReader(1 << 20, require_mask=False)
    assert reader.feed(ws.encode_frame(ws.OP_BINARY, payload)) == [ws.Message(False, payload)]


@given(st.sampled_from([1000, 1001, 1002, 1003, 1007, 1008, 1009, 1011, 3000, 4999]), texts)
def test_close_frames_read_back(code: int, reason: str) -> None:
    reader = ws.FrameReader(1 << 20, require_mask=False)
    (event,) = reader.feed(ws.encode_close(code, reason))
    assert isinstance(event, ws.Close)
    assert event.code == code
    assert reason.startswith(event.reason)
    assert len(event.reason.encode()) <= 123


@pytest.mark.parametrize(
    ("stream", "code", "words"),
    [
        (ws.encode_frame(ws.OP_TEXT, b"x"), 1002, "masked"),
        (bytes([0xC1, 0x80]) + b"mask", 1002, "RSV"),
        (ws.encode_frame(0x3, b"", mask=b"abcd"), 1002, "opcode"),
        (ws.encode_frame(ws.OP_PING, b"x", fin=False, mask=b"abcd"), 1002, "fragmented"),
        (ws.encode_frame(ws.OP_PING, b"x" * 126, mask=b"abcd"), 1002, "125"),
        (ws.encode_frame(ws.OP_CONTINUATION, b"x", mask=b"abcd"), 1002, "continuation"),
        (
            ws.encode_frame(ws.OP_TEXT, b"a", fin=False, mask=b"abcd")
            + ws.encode_frame(ws.OP_TEXT, b"b", mask=b"abcd"),
            1002,
            "before the last",
        ),
        (ws.encode_frame(ws.OP_TEXT, b"\xff\xfe", mask=b"abcd"), 1007, "UTF-8"),
        (ws.encode_frame(ws.OP_CLOSE, b"\x03", mask=b"abcd"), 1002, "1-byte"),
        (ws.encode_frame(ws.OP_CLOSE, b"\x03\xed", mask=b"abcd"), 1002, "1005"),
        (ws.encode_frame(ws.OP_CLOSE, b"\x03\xe8\xff", mask=b"abcd"), 1007, "UTF-8"),
        (ws.encode_frame(ws.OP_BINARY, b"x" * 101, mask=b"abcd"), 1009, "limit"),
        (
            ws.encode_frame(ws.OP_BINARY, b"x" * 60, fin=False, mask=b"abcd")
            + ws.encode_frame(ws.OP_CONTINUATION, b"x" * 60, mask=b"abcd"),
            1009,
            "limit",
        ),
        (bytes([0x82, 0xFF]) + (1 << 63).to_bytes(8, "big"), 1002, "top bit"),
    ],
)
def test_violations_get_their_close_code(stream: bytes, code: int, words: str) -> None:
    reader = ws.FrameReader(100)
    with pytest.raises(WebSocketError, match=words) as info:
        reader.feed(stream)
    assert info.value.close_code == code


def test_a_huge_frame_is_refused_from_its_header_alone() -> None:
    # 2**40 bytes announced, none sent: refused without waiting for them.
    head = bytes([0x82, 0xFF]) + (1 << 40).to_bytes(8, "big")
    with pytest.raises(WebSocketError) as info:
        ws.FrameReader(1 << 20).feed(head)
    assert info.value.close_code == ws.CLOSE_TOO_BIG


def test_accept_key_matches_rfc_example() -> None:
    # RFC 6455 section 1.3.
    assert ws.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def _headers(**over: str) -> dict[str, str]:
    h = {
        "upgrade": "websocket",
        "connection": "keep-alive, Upgrade",
        "sec-websocket-version": "13",
        "sec-websocket-key": base64.b64encode(os.urandom(16)).decode(),
    }
    h.update(over)
    return h


@pytest.mark.parametrize(
    ("method", "over", "status"),
    [
        ("POST", {}, 405),
        ("GET", {"upgrade": "h2c"}, 426),
        ("GET", {"connection": "keep-alive"}, 400),
        ("GET", {"sec-websocket-version": "8"}, 426),
        ("GET", {"sec-websocket-key": "short"}, 400),
    ],
)
def test_bad_upgrades_are_refused(method: str, over: dict[str, str], status: int) -> None:
    with pytest.raises(HandshakeRefused) as info:
        ws.check_upgrade(method, _headers(**over))
    assert info.value.status == status
    assert ws.check_upgrade("GET", _headers())
