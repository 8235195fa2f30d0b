"""A warm executor keeps one connection to the core across turns, each turn
presenting its own token over it, and reconnects when the core drops it.

Connections are counted from the kernel's socket tables (tests/unix_peers):
the ends the core accepted on its socket for the executor's connections.
A core with one executor, so every turn runs in the same process.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import pytest

from naga.sdk import Client
from naga_core.agent import AgentConfig
from tests.agent.conftest import AGENT, ServerThread, final, running_core, turn
from tests.daemon.conftest import InProcessCore
from tests.fakes.model_server import Reply
from tests.unix_peers import accepted_ends, socket_inodes

ONE_EXECUTOR = AgentConfig(
    executors=1,
    policy=AGENT.policy,
    model_read_timeout_s=AGENT.model_read_timeout_s,
    model_max_retries=AGENT.model_max_retries,
    turn_timeout_s=AGENT.turn_timeout_s,
)


@pytest.fixture(scope="module")
def one_executor_core(model_server: ServerThread) -> Iterator[InProcessCore]:
    with running_core(model_server, ONE_EXECUTOR) as core:
        yield core


def _executor_pid(client: Client) -> int:
    (pid,) = [p.pid for p in client.status().processes if p.role.startswith("executor:")]
    return pid


def _drop_core_side(accepted: int) -> None:
    """Shut down the core's end ``accepted`` of a connection (the core serves
    in this process): to the executor, the core dropped it."""
    fd = socket_inodes(os.getpid())[accepted]
    with contextlib.closing(socket.socket(fileno=os.dup(fd))) as end:
        end.shutdown(socket.SHUT_RDWR)


def test_turns_share_one_connection_and_survive_the_core_dropping_it(
    one_executor_core: InProcessCore, model_server: ServerThread
) -> None:
    with one_executor_core.client() as client:
        core_socket = client.socket
        model_server.script(Reply.answer("one", usage=(3, 1)))
        assert final(turn(client, "s-warm", "first")).text == "one"
        pid = _executor_pid(client)
        (first,) = accepted_ends(pid, core_socket)
        model_server.script(Reply.answer("two", usage=(3, 1)))
        assert final(turn(client, "s-warm", "second")).text == "two"
        model_server.script(Reply.answer("three", usage=(3, 1)))
        assert final(turn(client, "s-other", "third")).text == "three"
        assert accepted_ends(pid, core_socket) == {first}

        _drop_core_side(first)
        model_server.script(Reply.answer("four", usage=(3, 1)))
        assert final(turn(client, "s-warm", "after the drop")).text == "four"
        (again,) = accepted_ends(pid, core_socket)
        assert again != first
        assert _executor_pid(client) == pid  # the same process, reconnected
