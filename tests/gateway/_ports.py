"""Helpers for tests that start a core's gateway on chosen ports."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import trio

from naga.v1 import core_pb2 as cpb
from naga_core.supervisor import RestartPolicy
from tests.daemon.conftest import core_in_thread
from tests.gateway._login import core_codes, owner_client

#: Gives up at the second failure, within milliseconds.
FAST_GIVE_UP = RestartPolicy(backoff_s=0.01, backoff_max_s=0.02, loop_failures=2, loop_window_s=60)


def until_said(descriptions: Iterator[str], part: str) -> str:
    """The first ledger entry description holding ``part``."""
    for said in descriptions:
        if part in said:
            return said
    raise AssertionError(f"the subscription ended before an entry saying {part!r}")


def held_port_setting(home: str, port: int) -> socket.socket:
    """Set ``gateway.port`` to ``port`` (with a core that runs no gateway)
    and hold the port with a listening socket, so the next core's gateway
    cannot bind it; close the socket to free it."""
    with core_in_thread(home) as core, core.client() as c:
        c.set_setting_text("gateway.port", str(port))
        c.shutdown("port set")
        core.join()
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    return squatter


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:  # all bound at once: n distinct ports
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def gateway_row(rows: list[cpb.ProcessStatus]) -> cpb.ProcessStatus:
    (row,) = [r for r in rows if r.role == "gateway"]
    return row


async def console_answers(port: int, home: str) -> None:
    """The console on ``port`` admits the owner of ``home`` (by its proof)."""
    with trio.fail_after(20):
        c = await owner_client(port, core_codes(home))
        assert (await c.connect())["trust"] == "owner"
        await c.aclose()


__all__ = ["console_answers", "free_ports", "gateway_row"]
