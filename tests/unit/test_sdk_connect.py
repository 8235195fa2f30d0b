"""The SDK's channel against a core slow to finish a connection's handshake
(busy on a loaded box): the call waits for it within its own deadline
instead of reporting the core as not running after 100 ms."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Iterator

import pytest

from naga.sdk import Client, errors


@pytest.fixture
def silent_core() -> Iterator[str]:
    """A socket that accepts connections and never answers: a core whose
    loop is too busy to send its SETTINGS frame yet."""
    root = tempfile.mkdtemp(prefix="naga-sc-")
    path = os.path.join(root, "core.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    accepted: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(10)
        for conn in accepted:
            conn.close()
        os.unlink(path)
        os.rmdir(root)


def test_a_slow_handshake_is_waited_for_within_the_calls_deadline(silent_core: str) -> None:
    with (
        Client.connect(silent_core, b"x" * 32, timeout=1.5) as c,
        pytest.raises(errors.SdkError) as raised,
    ):
        c.head()
    # Not CoreUnavailable ("timed out before receiving SETTINGS frame"): the
    # connection was given the call's whole deadline.
    assert isinstance(raised.value, errors.DeadlineExceeded), raised.value
