"""What the sealing of a subject's sessions does in a core run in this
process (docs/adr/0037, docs/adr/0058): every seal and open counted, with
its bytes, and timed where it is called. For bench/turn.py's
``seal_ms_per_turn`` and the test that the counts match the ledger.

:func:`meter_seal` wraps, while it is entered, the entry points that seal
and open (``Sealer``'s methods, the module functions a replay calls, the
memory store's item seals) and, with ``nested``, what they call (the AEAD
calls, the keys made, the key ring's unwraps and key-file reads),
wherever a ``naga_core`` module holds them. The wrappers count and time;
they never change what a call does or returns. :func:`plain_arm` is the
bench's A/B alone: in a throwaway home, the turns it marks stage their
records and blobs unsealed. Nothing in the core knows of either: no
switch, no hook.

Timing is of the entry points only (their nested calls are inside their
time, never added twice; count with ``nested`` and time without it, as a
nested wrapper's own cost would be inside the time): the calling thread's
CPU (``time.thread_time``: not its waits for the GIL or for the machine's
other processes) and the wall time.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from naga.v1 import agent_pb2 as apb
from naga_core.memory import _crypto, _keys, _seal, _store

#: A recorded entry-point call: the Sealer method and its arguments.
Call = tuple[str, tuple[Any, ...]]


@dataclass
class SealMeter:
    """What the wrapped calls did since the last :meth:`clear`."""

    #: calls by label (see :func:`meter_seal`), bytes by "bytes:..." label
    counts: Counter[str] = field(default_factory=Counter[str])
    #: wall seconds inside the entry points, summed
    seconds: float = 0.0
    #: the calling threads' CPU seconds inside them
    cpu_seconds: float = 0.0
    #: the entry points' Sealer calls (method, arguments), for a replay,
    #: while :attr:`recording`
    calls: list[Call] = field(default_factory=list[Call])
    recording: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        with self._lock:
            self.counts.clear()
            self.seconds = self.cpu_seconds = 0.0
            self.calls.clear()

    def add(self, label: str, n: int = 1) -> None:
        with self._lock:
            self.counts[label] += n

    def took(self, wall: float, cpu: float) -> None:
        with self._lock:
            self.seconds += wall
            self.cpu_seconds += cpu

    def record(self, method: str, args: tuple[Any, ...]) -> None:
        if self.recording:
            copied = tuple(_copy(a) for a in args)
            with self._lock:
                self.calls.append((method, copied))


def _copy(arg: Any) -> Any:
    if isinstance(arg, apb.TurnRecord):
        out = apb.TurnRecord()
        out.CopyFrom(arg)
        return out
    return arg


class _Patches:
    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object]] = []

    def attr(self, owner: object, name: str, value: object) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def everywhere(self, original: Callable[..., Any], value: Callable[..., Any]) -> None:
        """Replace ``original`` in every naga_core module holding it (its
        own and those that imported it by name)."""
        for name, module in list(sys.modules.items()):
            if name.startswith("naga_core"):
                for attr, held in list(vars(module).items()):
                    if held is original:
                        self.attr(module, attr, value)

    def undo(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()


_depth = threading.local()


def _timed(meter: SealMeter, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` timed into ``meter`` when it is the outermost timed call of
    its thread (a replay's open_turn_with inside Sealer.open_turn is not)."""

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_depth, "n", 0)
        _depth.n = depth + 1
        try:
            if depth:
                return fn(*args, **kwargs)
            c0, t0 = time.thread_time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                meter.took(time.perf_counter() - t0, time.thread_time() - c0)
        finally:
            _depth.n = depth

    return timed


def _counted(meter: SealMeter, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        meter.add(label)
        return fn(*args, **kwargs)

    return counted


@contextlib.contextmanager
def meter_seal(*, nested: bool = True) -> Generator[SealMeter]:
    """Count and time every seal and open in this process while entered.

    Entry points (``counts``): ``seal_turn`` (a record sealed),
    ``seal_turn_clear`` (one with no text or no subject, staged as it is),
    ``open_turn`` / ``open_turn_clear`` (a record that was not sealed),
    ``seal_blob``, ``open_blob`` / ``open_blob_clear``, ``turn_key``,
    ``blob_key``, ``open_turn_with``, ``open_blob_with`` (an export's and a
    replay's), ``item_seal``, ``item_open`` (memory items); and
    ``bytes:record_growth`` / ``bytes:blob_growth``: what sealing adds to
    the ledger's payloads and to the blobs. With ``nested``, under them:
    ``aead_seal`` / ``aead_open`` (AES-256-GCM calls) with ``bytes:sealed``
    / ``bytes:opened`` (their plaintext), ``key_new`` (a key made: a data
    key, a subject key, the master), ``kek_unwrap`` (a subject key read
    and unwrapped: the ring's cache missed), ``kek_wrap`` (a subject key
    made), ``key_file_read``."""
    meter = SealMeter()
    p = _Patches()
    cls = _seal.Sealer
    seal_turn = _timed(meter, cls.seal_turn)
    open_turn = _timed(meter, cls.open_turn)
    seal_blob = _timed(meter, cls.seal_blob)
    open_blob = _timed(meter, cls.open_blob)

    def seal_turn_metered(
        self: _seal.Sealer, kind: str, subject: str, body: apb.TurnRecord
    ) -> apb.TurnRecord:
        meter.record("seal_turn", (kind, subject, body))
        out: apb.TurnRecord = seal_turn(self, kind, subject, body)
        if out is body:
            meter.add("seal_turn_clear")
        else:
            meter.add("seal_turn")
            meter.add("bytes:record_growth", out.ByteSize() - body.ByteSize())
        return out

    def open_turn_metered(self: _seal.Sealer, kind: str, body: apb.TurnRecord) -> apb.TurnRecord:
        meter.add("open_turn" if body.HasField("sealed") else "open_turn_clear")
        meter.record("open_turn", (kind, body))
        out: apb.TurnRecord = open_turn(self, kind, body)
        return out

    def seal_blob_metered(self: _seal.Sealer, subject: str, data: bytes) -> bytes:
        meter.record("seal_blob", (subject, data))
        out: bytes = seal_blob(self, subject, data)
        meter.add("seal_blob")
        meter.add("bytes:blob_growth", len(out) - len(data))
        return out

    def open_blob_metered(self: _seal.Sealer, data: bytes) -> bytes | None:
        meter.add("open_blob" if data.startswith(_seal.BLOB_MAGIC) else "open_blob_clear")
        meter.record("open_blob", (data,))
        out: bytes | None = open_blob(self, data)
        return out

    p.attr(cls, "seal_turn", seal_turn_metered)
    p.attr(cls, "open_turn", open_turn_metered)
    p.attr(cls, "seal_blob", seal_blob_metered)
    p.attr(cls, "open_blob", open_blob_metered)
    for name in ("turn_key", "blob_key"):
        p.attr(cls, name, _counted(meter, name, _timed(meter, getattr(cls, name))))
    for label, fn in (
        ("open_turn_with", _seal.open_turn_with),
        ("open_blob_with", _seal.open_blob_with),
        ("item_seal", _store.seal_item),
        ("item_open", _store.open_item),
    ):
        p.everywhere(fn, _counted(meter, label, _timed(meter, fn)))
    if nested:
        _nested(meter, p)
    try:
        yield meter
    finally:
        p.undo()


def _nested(meter: SealMeter, p: _Patches) -> None:
    aead_seal, aead_open = _crypto.seal, _crypto.open_box

    def sealed(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
        meter.add("aead_seal")
        meter.add("bytes:sealed", len(plaintext))
        return aead_seal(key, plaintext, aad)

    def opened(key: bytes, box: bytes, aad: bytes, what: str) -> bytes:
        meter.add("aead_open")
        out = aead_open(key, box, aad, what)
        meter.add("bytes:opened", len(out))
        return out

    for original, value in (
        (aead_seal, sealed),
        (aead_open, opened),
        (_crypto.new_key, _counted(meter, "key_new", _crypto.new_key)),
        (_crypto.unwrap_kek, _counted(meter, "kek_unwrap", _crypto.unwrap_kek)),
        (_crypto.wrap_kek, _counted(meter, "kek_wrap", _crypto.wrap_kek)),
        (
            _keys._read_private,  # pyright: ignore[reportPrivateUsage]
            _counted(meter, "key_file_read", _keys._read_private),  # pyright: ignore[reportPrivateUsage]
        ),
    ):
        p.everywhere(original, value)


@dataclass
class PlainSwitch:
    #: the next seals hand their input back (the A/B's unsealed arm)
    plain: bool = False


@contextlib.contextmanager
def plain_arm() -> Generator[PlainSwitch]:
    """The A/B's switch, for a throwaway home only: while ``plain`` is set,
    ``Sealer.seal_turn`` and ``Sealer.seal_blob`` hand back what they were
    given (records and blobs staged unsealed; the openers pass an unsealed
    record or blob through as it is). Either arm goes through the same one
    extra call."""
    switch = PlainSwitch()
    p = _Patches()
    cls = _seal.Sealer
    seal_turn, seal_blob = cls.seal_turn, cls.seal_blob

    def turn_or_plain(
        self: _seal.Sealer, kind: str, subject: str, body: apb.TurnRecord
    ) -> apb.TurnRecord:
        return body if switch.plain else seal_turn(self, kind, subject, body)

    def blob_or_plain(self: _seal.Sealer, subject: str, data: bytes) -> bytes:
        return data if switch.plain else seal_blob(self, subject, data)

    p.attr(cls, "seal_turn", turn_or_plain)
    p.attr(cls, "seal_blob", blob_or_plain)
    try:
        yield switch
    finally:
        p.undo()


def replay_us(
    sealer: _seal.Sealer, turns: list[list[Call]], reps: int
) -> tuple[list[float], list[float]]:
    """Microseconds each recorded turn's Sealer calls take when run again on
    ``sealer`` (its ring warm: one pass first), ``reps`` times: the same
    operations with the same arguments, with no core, no wrapper, no loop.
    (wall, this thread's CPU), one sample per turn and rep."""
    for calls in turns:
        for method, args in calls:
            getattr(sealer, method)(*args)
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(reps):
        for calls in turns:
            bound = [(getattr(sealer, m), a) for m, a in calls]
            c0, t0 = time.thread_time(), time.perf_counter()
            for fn, args in bound:
                fn(*args)
            wall.append((time.perf_counter() - t0) * 1e6)
            cpu.append((time.thread_time() - c0) * 1e6)
    return wall, cpu


__all__ = ["Call", "PlainSwitch", "SealMeter", "meter_seal", "plain_arm", "replay_us"]
