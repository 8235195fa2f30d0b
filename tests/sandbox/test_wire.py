"""The handshake framing between launcher and child, and the exit descriptions."""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandbox
from naga.v1 import sandbox_pb2
from sandbox import _wire
from sandbox._exit import describe_status


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):  # a test may have closed it
            os.close(fd)


FAILURES = st.builds(
    sandbox_pb2.SetupFailure,
    layer=st.sampled_from([layer.to_proto() for layer in sandbox.Layer]),
    errno=st.integers(min_value=0, max_value=4095),
    detail=st.text(max_size=200),
)


@given(messages=st.lists(FAILURES, max_size=5))
def test_messages_round_trip_through_a_pipe(messages: list[sandbox_pb2.SetupFailure]) -> None:
    r, w = os.pipe()
    try:
        for message in messages:
            _wire.write_message(w, sandbox_pb2.SetupReport(failure=message))
        os.close(w)
        w = -1
        for message in messages:
            got = _wire.read_message(r, sandbox_pb2.SetupReport(), deadline=time.monotonic() + 5)
            assert got is not None
            assert got.failure == message
        assert _wire.read_message(r, sandbox_pb2.SetupReport()) is None
    finally:
        os.close(r)
        if w != -1:
            os.close(w)


@pytest.mark.parametrize(
    ("written", "message"),
    [
        (b"\x00\x00", "cut short after 2 of 4 bytes"),
        (struct.pack(">I", 10) + b"abc", "cut short after 3 of 10 bytes"),
        (struct.pack(">I", (1 << 20) + 1), "announces 1048577 bytes"),
        (struct.pack(">I", 3) + b"\xff\xff\xff", "does not parse"),
    ],
)
def test_malformed_frames_are_refused(pipe: tuple[int, int], written: bytes, message: str) -> None:
    r, w = pipe
    os.write(w, written)
    os.close(w)
    with pytest.raises(sandbox.ProtocolError, match=message):
        _wire.read_message(r, sandbox_pb2.SetupReport())


def test_silence_past_the_deadline_times_out(pipe: tuple[int, int]) -> None:
    r, _ = pipe
    with pytest.raises(TimeoutError, match="within the deadline"):
        _wire.read_message(r, sandbox_pb2.SetupReport(), deadline=time.monotonic() + 0.05)


def test_oversized_message_is_not_written(pipe: tuple[int, int]) -> None:
    _, w = pipe
    with pytest.raises(sandbox.ProtocolError, match="exceeds"):
        _wire.write_message(w, sandbox_pb2.SandboxSpec(args=["x" * (1 << 20)]))


def test_layers_map_to_proto_and_back() -> None:
    for layer in sandbox.Layer:
        assert sandbox.Layer.from_proto(layer.to_proto()) is layer
    assert sandbox.Layer.from_proto(sandbox_pb2.SANDBOX_LAYER_UNSPECIFIED) is None


@pytest.mark.parametrize(
    ("returncode", "supervisor", "kind", "cause"),
    [
        (0, None, sandbox.ExitKind.EXITED, "exited with code 0"),
        (3, sandbox.ExitKind.DEADLINE, sandbox.ExitKind.EXITED, "exited with code 3"),
        (-signal.SIGSYS, None, sandbox.ExitKind.SIGNALED, "seccomp filter"),
        (-signal.SIGXCPU, None, sandbox.ExitKind.SIGNALED, "CPU time limit"),
        (-signal.SIGXFSZ, None, sandbox.ExitKind.SIGNALED, "file size limit"),
        (-signal.SIGSEGV, None, sandbox.ExitKind.SIGNALED, "crashed (SIGSEGV)"),
        (-signal.SIGKILL, None, sandbox.ExitKind.SIGNALED, "out of memory"),
        (-signal.SIGKILL, sandbox.ExitKind.DEADLINE, sandbox.ExitKind.DEADLINE, "deadline"),
        (-signal.SIGKILL, sandbox.ExitKind.STOPPED, sandbox.ExitKind.STOPPED, "found stopped"),
        # It died of something else just before the supervisor's SIGKILL landed.
        (-signal.SIGSYS, sandbox.ExitKind.DEADLINE, sandbox.ExitKind.SIGNALED, "seccomp"),
        (-signal.SIGTERM, None, sandbox.ExitKind.SIGNALED, "killed by SIGTERM"),
    ],
)
def test_exit_descriptions(
    returncode: int, supervisor: sandbox.ExitKind | None, kind: sandbox.ExitKind, cause: str
) -> None:
    end = describe_status(returncode, supervisor)
    assert end.kind is kind
    assert cause in end.cause
    assert end.by_seccomp == (returncode == -signal.SIGSYS)
    assert (end.code is None) == (returncode < 0)
