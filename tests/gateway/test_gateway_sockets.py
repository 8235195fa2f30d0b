"""The gateway opens no port of its own (issue 11): the core binds the
console's socket and hands it over; the gateway runs in a private network
namespace with no right to make, bind or listen on a TCP socket.

Before, the gateway bound its port itself under Landlock's bind rule, and
``listen()`` without ``bind()`` got it an ephemeral port on every interface
(the kernel's autobind, which Landlock never sees). Here a compromised
gateway (tests/gateway/_hostile_gateway.py: the real entry point, launched
by the real core with the real profile) attacks from inside its process
and then serves the console, which must still work."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import sandbox
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga_core.daemon import GatewayOptions
from naga_core.kernel._kernel import EFFECT_KIND
from tests.daemon.conftest import core_in_thread, home
from tests.gateway import _hostile_gateway
from tests.gateway._ports import FAST_GIVE_UP, console_answers, free_ports, gateway_row, until_said

__all__ = ["home"]  # the fixture, used by name below

HOSTILE = "tests.gateway._hostile_gateway:main"


@pytest.fixture
def loopback() -> Iterator[socket.socket]:
    """A TCP service on loopback (and the same port for UDP): what a
    compromised gateway would reach for."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        s.setblocking(False)
        yield s


@pytest.fixture
def abstract() -> Iterator[tuple[str, socket.socket]]:
    """An abstract Unix socket of the host (a session bus lives in one)."""
    name = f"naga-gw-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind("\0" + name)
        s.listen()
        s.setblocking(False)
        yield name, s


def _listening_ports_of(pid: int) -> list[int]:
    """The ports of the listening TCP sockets ``pid`` holds (the host's
    tables: the console's socket was made in the host's namespace)."""
    listening: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as f:
            for row in f.readlines()[1:]:
                cols = row.split()
                if cols[3] == "0A":  # TCP_LISTEN
                    listening[int(cols[9])] = int(cols[1].rsplit(":", 1)[1], 16)
    held: set[int] = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(int(target[len("socket:[") : -1]))
    return sorted(listening[inode] for inode in held if inode in listening)


def test_a_compromised_gateway_can_open_no_socket_and_the_console_still_works(
    home: str, loopback: socket.socket, abstract: tuple[str, socket.socket]
) -> None:
    (port,) = free_ports(1)
    name, abstract_listener = abstract
    work = Path(home, "work", "gateway")
    for made in (Path(home), work.parent, work):
        made.mkdir(mode=0o700, exist_ok=True)
    targets = {"port": loopback.getsockname()[1], "abstract": name}
    (work / _hostile_gateway.TARGETS).write_text(json.dumps(targets))
    options = GatewayOptions(enabled=True, port=port, target=HOSTILE)
    with core_in_thread(home, gateway=options) as core:
        with core.client() as c:
            row = gateway_row(list(c.status().processes))
        assert row.detail == f"http://127.0.0.1:{port}/", row
        found = json.loads((work / _hostile_gateway.ATTACKS).read_text())
        assert found == {
            # No TCP socket at all, so no listen() without bind() either.
            "listen_unbound_inet": "EPERM",
            "listen_unbound_inet6": "EPERM",
            "bind_inet": "EPERM",
            "bind_inet6": "EPERM",
            "socket_inet_dgram": "EPERM",
            "socket_packet": "EPERM",
            "socket_netlink": "EPERM",
            "connect_loopback_tcp": "EPERM",
            "send_loopback_udp": "EPERM",
            # Its own network namespace: the host's abstract names are not there.
            "connect_host_abstract": "ECONNREFUSED",
            # bind() and listen() themselves, even on a Unix socket.
            "listen_syscall": "EPERM",
            "bind_syscall": "EPERM",
        }, found
        with pytest.raises(BlockingIOError):
            loopback.accept()
        with pytest.raises(BlockingIOError):
            abstract_listener.accept()
        # Seen from outside: another network namespace, and the one
        # listening TCP socket it holds is the console's, bound by the core.
        assert os.readlink(f"/proc/{row.pid}/ns/net") != os.readlink("/proc/self/ns/net")
        assert _listening_ports_of(row.pid) == [port]
        # Where the kernel offers cgroups, it runs in one of its own.
        cgroups = sandbox.detect_cgroups()
        if cgroups.usable:
            mine = Path(f"/proc/{row.pid}/cgroup").read_text()
            assert "/naga-gateway-" in mine, mine
        # And the console serves the owner as ever.
        trio.run(console_answers, port, home)


def test_a_gateway_that_fills_its_work_directory_is_stopped(home: str) -> None:
    # Each file is within its 16 MiB RLIMIT_FSIZE; together past its quota.
    (port,) = free_ports(1)
    options = GatewayOptions(
        enabled=True,
        port=port,
        target="tests.gateway._hostile_gateway:fill",
        disk_bytes=8 << 20,
        disk_check_s=0.05,
        restart=FAST_GIVE_UP,
    )
    with core_in_thread(home, gateway=options) as core, core.client() as c:
        events = c.subscribe(0, kinds=[EFFECT_KIND], timeout=60)

        def descriptions() -> Iterator[str]:
            for event in events:
                if event.HasField("record"):
                    yield kpb.Effect.FromString(event.record.payload).description

        gave_up = until_said(descriptions(), "gave up")
        events.cancel()
        assert "disk quota exceeded: its work directory" in gave_up, gave_up
        assert "holds 12 MiB in 3 files, the quota is 8 MiB" in gave_up, gave_up
        row = gateway_row(list(c.status().processes))
        assert row.state == cpb.PROCESS_STATE_FAILED
        assert "disk quota exceeded" in row.detail
        c.shutdown("test done")
        assert not core.join().failed
