"""The sandboxed side's argument list, and the clear errors for a bad one."""

from __future__ import annotations

import os
import socket

import pytest

from naga_plugins.localmodel import BadServerArguments, serve


def _never(_listener: socket.socket, _args: list[str]) -> int:
    raise AssertionError("the server must not run on bad arguments")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "expected LIFELINE_FD LISTEN_FD GRACE_S"),
        (["3", "4"], "expected LIFELINE_FD LISTEN_FD GRACE_S"),
        (["x", "4", "5"], "LIFELINE_FD must be a descriptor number >= 3, got 'x'"),
        (["2", "4", "5"], "LIFELINE_FD must be a descriptor number >= 3, got '2'"),
        (["3", "-1", "5"], "LISTEN_FD must be a descriptor number >= 3, got '-1'"),
        (["3", "4", "soon"], "the stop grace must be seconds in 0..3600, got 'soon'"),
        (["3", "4", "-1"], "the stop grace must be seconds in 0..3600, got '-1'"),
        (["3", "4", "nan"], "the stop grace must be seconds in 0..3600, got 'nan'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(args: list[str], message: str) -> None:
    with pytest.raises(BadServerArguments) as caught:
        serve(args, _never)
    assert message in str(caught.value)


def test_a_listen_fd_that_is_not_a_stream_socket_is_refused() -> None:
    datagram = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    lifeline_r, lifeline_w = os.pipe()
    try:
        args = [str(lifeline_r), str(datagram.fileno()), "0"]
        with pytest.raises(BadServerArguments, match="is not a stream socket"):
            serve(args, _never)
    finally:
        datagram.close()
        os.close(lifeline_r)
        os.close(lifeline_w)
