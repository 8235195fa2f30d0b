"""The sd_notify protocol, spoken directly: no libsystemd.

A service of ``Type=notify`` tells systemd it is ready, stopping, still alive
(watchdog) or what it is doing by sending short ``KEY=VALUE`` datagrams to
the AF_UNIX socket named by ``$NOTIFY_SOCKET`` (sd_notify(3)). The protocol
is a few lines, so a C dependency and its ABI are not worth it; what is
worth it is refusing a garbled environment loudly instead of notifying
nobody and being killed by the watchdog later.

The core daemon uses it like this (naga_core.daemon._serve)::

    notify = take_notify_environ(os.environ)   # and removes the variables
    if notify.notifier is not None and notify.watchdog_ns is not None:
        await nursery.start(run_watchdog, notify.notifier, notify.watchdog_ns)
    with extending_timeout(notify.notifier):
        ...open and recover the ledger...
    ...serve...
    notifier.ready(status="serving on run/core.sock")
    ...on SIGTERM: notifier.stopping()

Children must not inherit ``NOTIFY_SOCKET`` or ``WATCHDOG_*`` (with
``NotifyAccess=main`` systemd ignores them anyway, but a child that
believed them would ping a watchdog that is not its own):
:func:`take_notify_environ` removes them as it reads them, like
``sd_notify``'s ``unset_environment``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, MutableMapping
from dataclasses import dataclass

import trio

from naga_core.errors import ConfigError, NagaError

#: sun_path holds 108 bytes; a filesystem path needs its terminating NUL, an
#: abstract name spends one byte on its leading NUL.
_SUN_PATH_MAX = 107
#: systemd reads at most this many bytes of one notification (PIPE_BUF) and
#: drops longer ones, so a longer message is refused rather than lost.
MAX_MESSAGE_BYTES = 4096
#: A send blocks only when the manager's queue is full; a stalled manager must
#: not stall the core's trio thread for long.
SEND_TIMEOUT_S = 1.0

log = logging.getLogger("naga.core")

_UNSIGNED = re.compile(r"[0-9]{1,20}")
_U64_MAX = (1 << 64) - 1


class NotifyEnvironmentInvalid(ConfigError):
    """``$NOTIFY_SOCKET``, ``$WATCHDOG_USEC`` or ``$WATCHDOG_PID`` is garbage."""


class NotifyFailed(NagaError):
    """A notification could not be delivered to the service manager."""


@dataclass(frozen=True, slots=True)
class Notifier:
    """Where notifications go: ``address`` is the raw sockaddr path (leading
    NUL for an abstract socket); ``name`` is how ``$NOTIFY_SOCKET`` spelled it."""

    address: bytes
    name: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Notifier | None:
        """The notifier ``environ`` names; None when not run by systemd."""
        raw = environ.get("NOTIFY_SOCKET")
        if raw is None:
            return None
        return cls.parse(raw)

    @classmethod
    def parse(cls, value: str) -> Notifier:
        """A ``$NOTIFY_SOCKET`` value: ``/abs/path`` or ``@abstract-name``."""
        shown = repr(value)
        if not value:
            raise NotifyEnvironmentInvalid("NOTIFY_SOCKET is set but empty")
        if "\0" in value:
            raise NotifyEnvironmentInvalid(f"NOTIFY_SOCKET={shown} contains a NUL byte")
        if value.startswith("vsock:"):
            raise NotifyEnvironmentInvalid(
                f"NOTIFY_SOCKET={shown} is an AF_VSOCK address; Naga notifies only over AF_UNIX"
            )
        if value.startswith("@"):
            name = os.fsencode(value[1:])
            if not name:
                raise NotifyEnvironmentInvalid(
                    f"NOTIFY_SOCKET={shown} names an empty abstract socket"
                )
            address = b"\0" + name
        elif value.startswith("/"):
            address = os.fsencode(value)
        else:
            raise NotifyEnvironmentInvalid(
                f"NOTIFY_SOCKET={shown} is neither an absolute path nor an @abstract name"
            )
        if len(address) > _SUN_PATH_MAX:
            raise NotifyEnvironmentInvalid(
                f"NOTIFY_SOCKET={shown} is {len(address)} bytes long; "
                f"a Unix socket address holds at most {_SUN_PATH_MAX}"
            )
        return cls(address, value)

    # --- the messages ---------------------------------------------------------

    def ready(self, status: str | None = None) -> None:
        """Start-up is complete (``READY=1``); systemd starts what depends on us."""
        self.send(("READY", "1"), *_status(status))

    def stopping(self, status: str | None = None) -> None:
        """Shutdown has begun (``STOPPING=1``)."""
        self.send(("STOPPING", "1"), *_status(status))

    def reloading(self, status: str | None = None) -> None:
        """A reload has begun; ``MONOTONIC_USEC`` lets systemd order it
        against the ``READY=1`` that ends it (systemd >= 253 requires it)."""
        now_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.send(("RELOADING", "1"), ("MONOTONIC_USEC", str(now_us)), *_status(status))

    def watchdog(self) -> None:
        """Still alive (``WATCHDOG=1``); resets the ``WatchdogSec=`` timer."""
        self.send(("WATCHDOG", "1"))

    def status(self, text: str) -> None:
        """A one-line status for ``systemctl status`` (``STATUS=...``)."""
        self.send(("STATUS", text))

    def extend_timeout(self, seconds: float) -> None:
        """Ask for more time to start or stop (``EXTEND_TIMEOUT_USEC``): a long
        ledger recovery is not a hang."""
        if not seconds > 0:
            raise ValueError(f"timeout extension must be positive, got {seconds!r}")
        self.send(("EXTEND_TIMEOUT_USEC", str(round(seconds * 1_000_000))))

    def send(self, *fields: tuple[str, str]) -> None:
        """Send one datagram of ``KEY=VALUE`` lines."""
        message = encode(fields)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(SEND_TIMEOUT_S)
                sock.sendto(message, self.address)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise NotifyFailed(
                f"cannot notify the service manager at {self.name}: {reason}"
            ) from None


def encode(fields: tuple[tuple[str, str], ...]) -> bytes:
    """The datagram for ``fields``; refuses what systemd would misread."""
    if not fields:
        raise ValueError("a notification needs at least one field")
    lines: list[str] = []
    for key, value in fields:
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            raise ValueError(f"notification key {key!r} is not an upper-case identifier")
        # A newline would smuggle in another assignment (STATUS="x\nREADY=1");
        # systemd drops messages with a NUL.
        if "\n" in value or "\0" in value:
            raise ValueError(f"{key} value {value!r} contains a newline or NUL")
        lines.append(f"{key}={value}")
    try:
        message = "\n".join(lines).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"notification is not valid UTF-8: {exc.reason}") from None
    if len(message) > MAX_MESSAGE_BYTES:
        raise ValueError(
            f"notification is {len(message)} bytes; systemd reads at most {MAX_MESSAGE_BYTES}"
        )
    return message


def _status(status: str | None) -> tuple[tuple[str, str], ...]:
    return () if status is None else (("STATUS", status),)


def watchdog_interval_ns(environ: Mapping[str, str], *, pid: int | None = None) -> int | None:
    """``$WATCHDOG_USEC`` in nanoseconds, or None when there is no watchdog
    for this process (unset, or ``$WATCHDOG_PID`` names another process:
    the variables were inherited). ``pid`` defaults to ``os.getpid()``."""
    raw = environ.get("WATCHDOG_USEC")
    if raw is None:
        return None
    usec = _positive("WATCHDOG_USEC", raw)
    raw_pid = environ.get("WATCHDOG_PID")
    if raw_pid is not None:
        owner = _positive("WATCHDOG_PID", raw_pid)
        if owner != (os.getpid() if pid is None else pid):
            return None
    return usec * 1000


def _positive(variable: str, raw: str) -> int:
    if not _UNSIGNED.fullmatch(raw):
        raise NotifyEnvironmentInvalid(f"{variable}={raw!r} is not a positive decimal integer")
    value = int(raw)
    if not 0 < value <= _U64_MAX:
        raise NotifyEnvironmentInvalid(f"{variable}={raw!r} is out of range (1 .. 2**64-1)")
    return value


#: The variables systemd sets for a notify service's main process.
NOTIFY_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


@dataclass(frozen=True, slots=True)
class NotifyEnvironment:
    """What the service manager asked of this process: where to notify
    (None: not run by systemd) and the watchdog interval (None: none)."""

    notifier: Notifier | None
    watchdog_ns: int | None


def take_notify_environ(environ: MutableMapping[str, str]) -> NotifyEnvironment:
    """Read the notify variables of ``environ`` and remove them, so nothing
    started from here inherits them. Refuses garbage before removing anything."""
    found = NotifyEnvironment(Notifier.from_environ(environ), watchdog_interval_ns(environ))
    for name in NOTIFY_VARIABLES:
        environ.pop(name, None)
    return found


@contextlib.contextmanager
def extending_timeout(
    notifier: Notifier | None,
    *,
    every_s: float = 10.0,
    by_s: float = 30.0,
    at_most_s: float = 600.0,
) -> Generator[None]:
    """While the block runs (a blocking ledger recovery), ask for ``by_s``
    more seconds of start-up time every ``every_s``, for at most
    ``at_most_s`` in all: a long recovery is not a hang, but a recovery
    stuck past the cap still fails the start. A block that ends before
    ``every_s`` sends nothing. The thread is joined when the block ends;
    a failed send is not retried (the start timeout then applies)."""
    if notifier is None:
        yield
        return
    done = threading.Event()

    def extend() -> None:
        waited = 0.0
        while waited + every_s <= at_most_s and not done.wait(every_s):
            waited += every_s
            try:
                notifier.extend_timeout(by_s)
            except NotifyFailed:
                return

    thread = threading.Thread(target=extend, name="naga-extend-timeout")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


#: Asked before every ping: None while the core makes progress, else what
#: does not (naga_core.daemon._liveness). ``budget_s`` is how long it may take.
Progress = Callable[[float], Awaitable[str | None]]


async def run_watchdog(
    notifier: Notifier,
    interval_ns: int,
    progress: Progress | None = None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Ping the watchdog every ``interval_ns / 2`` (sd_watchdog_enabled(3)
    advises half) until cancelled, but only while ``progress`` says the core
    makes progress: a core whose ledger writer or supervisor is stuck stops
    pinging, and systemd's watchdog restarts it (a loop that merely runs is
    not enough).

    The first ping goes out before ``task_status.started()``, so a broken
    socket fails ``nursery.start`` rather than a later, unobserved ping. A
    failed ping raises :class:`NotifyFailed` into the owning nursery: a core
    that cannot reach its watchdog would be killed by systemd anyway, and
    should rather stop cleanly and say why.
    """
    if interval_ns <= 0:
        raise ValueError(f"watchdog interval must be positive, got {interval_ns} ns")
    period = interval_ns / 2e9
    notifier.watchdog()
    task_status.started()
    deadline = trio.current_time()
    stalled = ""
    while True:
        # A fixed schedule rather than sleep(period) after each ping, so the
        # pings do not drift later by the time each send takes; after a stall
        # the next ping goes out at once instead of in a burst.
        deadline = max(deadline + period, trio.current_time())
        await trio.sleep_until(deadline)
        problem = await progress(period / 2) if progress is not None else None
        if problem is not None:
            if problem != stalled:
                log.error("naga-core: no watchdog ping: %s", problem)
                with contextlib.suppress(NotifyFailed):
                    notifier.status(f"stalled: {problem}")
            stalled = problem
            continue
        if stalled:
            log.warning("naga-core: progress again; watchdog pings resume")
            with contextlib.suppress(NotifyFailed):
                notifier.status("serving (progress again)")
            stalled = ""
        notifier.watchdog()
