"""sd_notify against real AF_UNIX datagram sockets, bound where systemd would
bind them (a path, an abstract name), receiving the exact bytes sent."""

from __future__ import annotations

import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from naga_core._sdnotify import (
    MAX_MESSAGE_BYTES,
    NOTIFY_VARIABLES,
    Notifier,
    NotifyEnvironmentInvalid,
    NotifyFailed,
    extending_timeout,
    run_watchdog,
    take_notify_environ,
    watchdog_interval_ns,
)


class Receiver:
    """A bound datagram socket standing in for systemd's notify socket."""

    def __init__(self, sock: socket.socket, env_value: str) -> None:
        self.sock = sock
        self.env = {"NOTIFY_SOCKET": env_value}

    def notifier(self) -> Notifier:
        notifier = Notifier.from_environ(self.env)
        assert notifier is not None
        return notifier

    def take(self) -> bytes:
        return self.sock.recv(MAX_MESSAGE_BYTES + 1)

    def pending(self) -> list[bytes]:
        """Every datagram queued now, without waiting."""
        out: list[bytes] = []
        self.sock.setblocking(False)
        try:
            while True:
                out.append(self.sock.recv(MAX_MESSAGE_BYTES + 1))
        except BlockingIOError:
            return out
        finally:
            self.sock.setblocking(True)


@pytest.fixture
def path_receiver() -> Iterator[Receiver]:
    # Not tmp_path: its long names can pass the 107-byte sun_path limit.
    with (
        tempfile.TemporaryDirectory(prefix="naga-sd-") as d,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
    ):
        path = os.path.join(d, "notify")
        sock.bind(path)
        sock.settimeout(5)
        yield Receiver(sock, path)


@pytest.fixture
def abstract_receiver() -> Iterator[Receiver]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"")  # autobind: the kernel picks a unique abstract name
        name: bytes = sock.getsockname()
        assert name.startswith(b"\0")
        sock.settimeout(5)
        yield Receiver(sock, "@" + name[1:].decode())


@pytest.fixture(params=["path", "abstract"])
def receiver(request: pytest.FixtureRequest) -> Receiver:
    return request.getfixturevalue(f"{request.param}_receiver")


# --- messages ---------------------------------------------------------------------


def test_no_notify_socket_means_no_notifier() -> None:
    assert Notifier.from_environ({}) is None
    assert Notifier.from_environ({"WATCHDOG_USEC": "1000"}) is None


def test_each_message_is_one_exact_datagram(receiver: Receiver) -> None:
    n = receiver.notifier()
    n.ready()
    assert receiver.take() == b"READY=1"
    n.ready(status="serving on run/core.sock")
    assert receiver.take() == b"READY=1\nSTATUS=serving on run/core.sock"
    n.stopping()
    assert receiver.take() == b"STOPPING=1"
    n.stopping(status="draining 3 calls")
    assert receiver.take() == b"STOPPING=1\nSTATUS=draining 3 calls"
    n.watchdog()
    assert receiver.take() == b"WATCHDOG=1"
    n.status("recovering the ledger: 40%")
    assert receiver.take() == b"STATUS=recovering the ledger: 40%"
    n.status("héllo ✓")
    assert receiver.take() == "STATUS=héllo ✓".encode()
    n.extend_timeout(2.5)
    assert receiver.take() == b"EXTEND_TIMEOUT_USEC=2500000"
    assert receiver.pending() == []


def test_reloading_carries_the_monotonic_clock(receiver: Receiver) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    receiver.notifier().reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    m = re.fullmatch(rb"RELOADING=1\nMONOTONIC_USEC=([0-9]+)", receiver.take())
    assert m is not None
    assert before <= int(m.group(1)) <= after


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("ok\nREADY=1", "contains a newline or NUL"),
        ("a\0b", "contains a newline or NUL"),
        ("\udcff", "not valid UTF-8"),
        ("x" * MAX_MESSAGE_BYTES, f"systemd reads at most {MAX_MESSAGE_BYTES}"),
    ],
)
def test_a_status_systemd_would_misread_is_refused_and_nothing_is_sent(
    path_receiver: Receiver, text: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        path_receiver.notifier().status(text)
    assert path_receiver.pending() == []


def test_the_longest_status_systemd_reads_is_sent(path_receiver: Receiver) -> None:
    text = "x" * (MAX_MESSAGE_BYTES - len("STATUS="))
    path_receiver.notifier().status(text)
    assert path_receiver.take() == f"STATUS={text}".encode()


def test_bad_field_key_and_timeout_are_refused(path_receiver: Receiver) -> None:
    n = path_receiver.notifier()
    with pytest.raises(ValueError, match="not an upper-case identifier"):
        n.send(("ready", "1"))
    with pytest.raises(ValueError, match="at least one field"):
        n.send()
    with pytest.raises(ValueError, match="must be positive"):
        n.extend_timeout(0)
    assert path_receiver.pending() == []


def test_nobody_listening_is_a_clear_failure() -> None:
    with tempfile.TemporaryDirectory(prefix="naga-sd-") as d:
        gone = os.path.join(d, "notify")
        with pytest.raises(NotifyFailed, match=re.escape(f"at {gone}: No such file")):
            Notifier.parse(gone).ready()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stream:
            stream.bind(gone)  # a socket of the wrong type
            with pytest.raises(NotifyFailed, match=re.escape(f"at {gone}:")):
                Notifier.parse(gone).watchdog()


# --- NOTIFY_SOCKET validation --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "NOTIFY_SOCKET is set but empty"),
        ("run/notify", "neither an absolute path nor an @abstract name"),
        (" /run/notify", "neither an absolute path nor an @abstract name"),
        ("vsock:2:1234", "is an AF_VSOCK address"),
        ("@", "names an empty abstract socket"),
        ("/run/\0notify", "contains a NUL byte"),
        ("/" + "n" * 107, "is 108 bytes long; a Unix socket address holds at most 107"),
        ("@" + "n" * 107, "is 108 bytes long; a Unix socket address holds at most 107"),
        ("/run/" + "é" * 60, "is 125 bytes long"),
    ],
)
def test_a_garbled_notify_socket_is_refused_by_name(value: str, problem: str) -> None:
    with pytest.raises(NotifyEnvironmentInvalid, match=re.escape(problem)):
        Notifier.from_environ({"NOTIFY_SOCKET": value})


def test_the_longest_addresses_are_accepted() -> None:
    assert Notifier.parse("/" + "n" * 106).address == b"/" + b"n" * 106
    assert Notifier.parse("@" + "n" * 106).address == b"\0" + b"n" * 106


def test_a_refusal_is_a_config_error() -> None:
    from naga_core.errors import ConfigError

    with pytest.raises(ConfigError):
        Notifier.parse("relative")


# --- watchdog interval ------------------------------------------------------------------


def test_watchdog_interval_from_the_environment() -> None:
    me = os.getpid()
    assert watchdog_interval_ns({}) is None
    assert watchdog_interval_ns({"WATCHDOG_USEC": "30000000"}) == 30_000_000_000
    assert watchdog_interval_ns({"WATCHDOG_USEC": "1", "WATCHDOG_PID": str(me)}) == 1000
    # Inherited from a parent that was the watched service: not ours.
    assert watchdog_interval_ns({"WATCHDOG_USEC": "1", "WATCHDOG_PID": str(me + 1)}) is None
    assert watchdog_interval_ns({"WATCHDOG_USEC": "5", "WATCHDOG_PID": "42"}, pid=42) == 5000
    # Without WATCHDOG_USEC a stray WATCHDOG_PID means nothing.
    assert watchdog_interval_ns({"WATCHDOG_PID": "garbage"}) is None


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"WATCHDOG_USEC": ""}, "WATCHDOG_USEC='' is not a positive decimal integer"),
        ({"WATCHDOG_USEC": "abc"}, "WATCHDOG_USEC='abc' is not a positive decimal integer"),
        ({"WATCHDOG_USEC": "-5"}, "WATCHDOG_USEC='-5' is not a positive"),
        ({"WATCHDOG_USEC": " 5"}, "WATCHDOG_USEC=' 5' is not a positive"),
        ({"WATCHDOG_USEC": "1e6"}, "WATCHDOG_USEC='1e6' is not a positive"),
        ({"WATCHDOG_USEC": "٣"}, "is not a positive decimal integer"),
        ({"WATCHDOG_USEC": "0"}, "WATCHDOG_USEC='0' is out of range"),
        ({"WATCHDOG_USEC": str(1 << 64)}, "is out of range (1 .. 2**64-1)"),
        ({"WATCHDOG_USEC": "9" * 21}, "is not a positive decimal integer"),
        ({"WATCHDOG_USEC": "100", "WATCHDOG_PID": "self"}, "WATCHDOG_PID='self' is not"),
        ({"WATCHDOG_USEC": "100", "WATCHDOG_PID": "0"}, "WATCHDOG_PID='0' is out of range"),
    ],
)
def test_garbled_watchdog_variables_are_refused_by_name(env: dict[str, str], problem: str) -> None:
    with pytest.raises(NotifyEnvironmentInvalid, match=re.escape(problem)):
        watchdog_interval_ns(env)


# --- the watchdog task -------------------------------------------------------------------


def test_watchdog_pings_at_half_the_interval(receiver: Receiver) -> None:
    notifier = receiver.notifier()
    interval_ns = 10_000_000_000  # WatchdogSec=10 -> a ping every 5 s
    received: list[tuple[float, bytes]] = []

    async def main() -> None:
        tsock = trio.socket.from_stdlib_socket(receiver.sock)
        start = trio.current_time()

        async def collect() -> None:
            while True:
                data = await tsock.recv(MAX_MESSAGE_BYTES)
                received.append((trio.current_time() - start, data))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect)
            await nursery.start(run_watchdog, notifier, interval_ns)
            await trio.sleep(22.5)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert received == [(t, b"WATCHDOG=1") for t in (0.0, 5.0, 10.0, 15.0, 20.0)]


def test_a_ping_is_queued_when_start_returns(path_receiver: Receiver) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_watchdog, path_receiver.notifier(), 10**9)
            assert path_receiver.pending() == [b"WATCHDOG=1"]
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_watchdog_start_fails_when_the_socket_is_gone() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            # start() re-raises the task's error in its caller, unwrapped.
            with pytest.raises(NotifyFailed, match="No such file"):
                await nursery.start(run_watchdog, Notifier.parse("/nonexistent/naga/notify"), 10**9)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_watchdog_refuses_a_non_positive_interval(path_receiver: Receiver) -> None:
    async def main() -> None:
        await run_watchdog(path_receiver.notifier(), 0)

    with pytest.raises(ValueError, match="must be positive, got 0 ns"):
        trio.run(main)
    assert path_receiver.pending() == []


# --- the environment children inherit, and start-up time -------------------------------


def test_taking_the_notify_environment_removes_it(path_receiver: Receiver) -> None:
    env = {
        "NOTIFY_SOCKET": path_receiver.env["NOTIFY_SOCKET"],
        "WATCHDOG_USEC": "30000000",
        "WATCHDOG_PID": str(os.getpid()),
        "PATH": "/bin",
    }
    taken = take_notify_environ(env)
    assert taken.watchdog_ns == 30 * 10**9
    assert taken.notifier is not None
    taken.notifier.ready()
    assert path_receiver.take() == b"READY=1"
    assert env == {"PATH": "/bin"}
    assert take_notify_environ(env).notifier is None  # nothing left to inherit


def test_a_garbled_notify_environment_is_refused_and_left_as_it_was() -> None:
    env = {"NOTIFY_SOCKET": "relative/path", "WATCHDOG_USEC": "1"}
    with pytest.raises(NotifyEnvironmentInvalid, match="neither an absolute path"):
        take_notify_environ(env)
    assert set(env) == {"NOTIFY_SOCKET", "WATCHDOG_USEC"}
    assert set(NOTIFY_VARIABLES) >= set(env)


def test_start_up_time_is_extended_while_the_block_runs_up_to_a_cap(
    path_receiver: Receiver,
) -> None:
    # Binary-exact steps: the cap allows exactly three extensions.
    with extending_timeout(path_receiver.notifier(), every_s=0.0625, by_s=2, at_most_s=0.1875):
        got = [path_receiver.take() for _ in range(3)]
    assert got == [b"EXTEND_TIMEOUT_USEC=2000000"] * 3
    assert path_receiver.pending() == []  # the thread was joined; nothing more


def test_a_short_block_asks_for_nothing(path_receiver: Receiver) -> None:
    with extending_timeout(path_receiver.notifier(), every_s=30):
        pass
    with extending_timeout(None):
        pass
    assert path_receiver.pending() == []
