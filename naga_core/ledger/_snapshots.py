"""Snapshots, so that opening a large ledger does not replay it all.

A snapshot is opaque state bytes (the kernel's serialized state, say) taken
at a ledger position and bound to it by that record's leaf hash: on open the
ledger loads the newest snapshot that is intact *and* whose position still
holds the same record, then replays only the records after it. A snapshot is
an optimisation, never a source of truth, so a damaged or stale one is
skipped (and reported), not fatal: an older one, or a full replay, is used.

On disk, ``root/<name>-<seq, 20 digits>.snap``::

    magic "NGSNAP1\\n" | name_len u8 | name | seq u64 | leaf_hash 32 |
    state_len u64 | state | sha256 32                         (big-endian)

The trailing SHA-256 covers every byte before it. Files are written with
:func:`~naga_core.ledger._fs.write_atomic`, so a crash leaves the old set of
snapshots or the new one, and only then are the oldest pruned.
"""

from __future__ import annotations

import hashlib
import os.path
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

from naga.constants import SNAPSHOTS_KEPT
from naga_core.errors import LedgerError
from naga_core.ledger._fs import FileSystem, makedirs, write_atomic

# Format and naming literals; they belong with the file format, not the
# tunables in naga.constants.
_MAGIC = b"NGSNAP1\n"
_NAME_RE = re.compile(r"[a-z0-9_.-]{1,40}")
_MAX_NAME = 40
_SEQ_DIGITS = 20
_SUFFIX = ".snap"
_TMP_SUFFIX = ".tmp"  # what write_atomic appends
_HASH_BYTES = 32
_MAX_U64 = (1 << 64) - 1
_FIXED = struct.Struct(">Q32sQ")  # seq, leaf_hash, state_len
# magic, name_len, a 1-byte name, the fixed fields and the checksum.
_MIN_FILE = len(_MAGIC) + 1 + 1 + _FIXED.size + _HASH_BYTES

# `list` is a method below; a module-level alias keeps annotations unambiguous.
_Listing = list[tuple[int, str]]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """State at ledger position ``seq``, whose record has ``leaf_hash``."""

    seq: int
    leaf_hash: bytes
    state: bytes
    name: str


class _Damaged(Exception):
    """A snapshot file is not what :func:`_encode` writes; args[0] says why."""


def _check_name(name: str) -> str:
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"snapshot name must match [a-z0-9_.-]{{1,{_MAX_NAME}}}, got {name!r}")
    return name


def _encode(name: str, seq: int, leaf_hash: bytes, state: bytes) -> bytes:
    raw_name = name.encode("ascii")
    body = b"".join(
        (
            _MAGIC,
            bytes((len(raw_name),)),
            raw_name,
            _FIXED.pack(seq, leaf_hash, len(state)),
            state,
        )
    )
    return body + hashlib.sha256(body).digest()


def _decode(raw: bytes) -> Snapshot:
    """Parse strictly; _Damaged names the first thing wrong."""
    if len(raw) < _MIN_FILE:
        raise _Damaged(f"truncated: {len(raw)} bytes, a snapshot has at least {_MIN_FILE}")
    if raw[: len(_MAGIC)] != _MAGIC:
        raise _Damaged(f"bad magic {raw[: len(_MAGIC)]!r}, expected {_MAGIC!r}")
    pos = len(_MAGIC)
    name_len = raw[pos]
    pos += 1
    if not 1 <= name_len <= _MAX_NAME:
        raise _Damaged(f"name length {name_len} is outside 1..{_MAX_NAME}")
    header_end = pos + name_len + _FIXED.size
    if len(raw) < header_end + _HASH_BYTES:
        raise _Damaged(f"truncated: {len(raw)} bytes, the header alone needs {header_end}")
    name = raw[pos : pos + name_len].decode("ascii", errors="replace")
    if _NAME_RE.fullmatch(name) is None:
        raise _Damaged(f"name {name!r} in the header is not a valid snapshot name")
    seq, leaf_hash, state_len = _FIXED.unpack_from(raw, pos + name_len)
    expected = header_end + state_len + _HASH_BYTES
    if len(raw) < expected:
        raise _Damaged(f"truncated: {len(raw)} bytes, the header says {expected}")
    if len(raw) > expected:
        raise _Damaged(f"{len(raw) - expected} bytes of trailing garbage after the checksum")
    body, checksum = raw[:-_HASH_BYTES], raw[-_HASH_BYTES:]
    if hashlib.sha256(body).digest() != checksum:
        raise _Damaged("checksum mismatch: the content was altered")
    return Snapshot(seq, leaf_hash, raw[header_end : header_end + state_len], name)


class SnapshotStore:
    """Named snapshot series in one directory, the newest ``keep`` of each."""

    def __init__(self, fs: FileSystem, root: str, *, keep: int = SNAPSHOTS_KEPT) -> None:
        if not os.path.isabs(root):
            raise ValueError(f"snapshot root must be an absolute path, got {root!r}")
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self._fs = fs
        self._root = os.path.normpath(root)
        self._keep = keep
        #: (path, reason) for every snapshot :meth:`latest` passed over since
        #: this store was made: what the recovery report shows.
        self.skipped: list[tuple[str, str]] = []

    @property
    def root(self) -> str:
        return self._root

    def path_of(self, name: str, seq: int) -> str:
        _check_name(name)
        if not 0 <= seq <= _MAX_U64:
            raise ValueError(f"snapshot seq must fit in an unsigned 64-bit integer, got {seq}")
        return os.path.join(self._root, f"{name}-{seq:0{_SEQ_DIGITS}d}{_SUFFIX}")

    def save(self, name: str, seq: int, leaf_hash: bytes, state: bytes) -> None:
        """Durably write a snapshot, then prune ``name`` to the newest ``keep``.

        Saving the same (name, seq) again replaces that snapshot. Pruning goes
        by seq, so saving one older than the ``keep`` newest removes it again.
        LedgerError if the disk fails; the snapshots already there stay usable.
        """
        path = self.path_of(name, seq)
        if len(leaf_hash) != _HASH_BYTES:
            raise ValueError(f"leaf_hash is {_HASH_BYTES} bytes, got {len(leaf_hash)}")
        data = _encode(name, seq, bytes(leaf_hash), bytes(state))
        try:
            makedirs(self._fs, self._root)
            write_atomic(self._fs, path, data)
        except OSError as e:
            raise LedgerError(f"cannot save snapshot {path}: {e}") from e
        try:
            self._prune(name)
        except OSError as e:
            raise LedgerError(f"snapshot {path} saved, but pruning old ones failed: {e}") from e

    def latest(self, name: str, is_valid: Callable[[int, bytes], bool]) -> Snapshot | None:
        """The newest intact snapshot of ``name`` that ``is_valid(seq, leaf_hash)``.

        ``is_valid`` is the ledger's check that record ``seq`` exists with that
        leaf hash. Each snapshot passed over on the way is appended to
        :attr:`skipped` with the reason. None if no snapshot qualifies.
        """
        for seq, path in reversed(self.list(name)):
            try:
                raw = self._fs.read(path)
            except OSError as e:
                self.skipped.append((path, f"unreadable: {e}"))
                continue
            try:
                snap = _decode(raw)
            except _Damaged as e:
                self.skipped.append((path, str(e)))
                continue
            if snap.name != name or snap.seq != seq:
                self.skipped.append(
                    (path, f"header says {snap.name!r} at seq {snap.seq}, the file name disagrees")
                )
                continue
            if not is_valid(snap.seq, snap.leaf_hash):
                self.skipped.append(
                    (
                        path,
                        f"does not match the ledger: no record {snap.seq} "
                        f"with leaf hash {snap.leaf_hash.hex()}",
                    )
                )
                continue
            return snap
        return None

    def list(self, name: str) -> _Listing:
        """(seq, path) of every snapshot file of ``name``, ascending by seq.

        Goes by file name only; :meth:`latest` is what reads and checks them.
        """
        _check_name(name)
        found: _Listing = []
        try:
            if not self._fs.is_dir(self._root):
                return found
            entries = self._fs.listdir(self._root)
        except OSError as e:
            raise LedgerError(f"cannot list snapshots in {self._root}: {e}") from e
        prefix = f"{name}-"
        for entry in entries:
            seq = self._seq_of(entry, prefix, _SUFFIX)
            if seq is not None:
                found.append((seq, os.path.join(self._root, entry)))
        found.sort()
        return found

    # --- internals -----------------------------------------------------------

    @staticmethod
    def _seq_of(entry: str, prefix: str, suffix: str) -> int | None:
        # Names may contain "-", so insist on exactly 20 digits after the
        # prefix: "a-..." never picks up the files of a series named "a-b".
        if not (entry.startswith(prefix) and entry.endswith(suffix)):
            return None
        digits = entry[len(prefix) : len(entry) - len(suffix)]
        if len(digits) != _SEQ_DIGITS or not digits.isascii() or not digits.isdigit():
            return None
        return int(digits)

    def _prune(self, name: str) -> None:
        removed = False
        for _seq, path in self.list(name)[: -self._keep]:
            self._fs.remove(path)
            removed = True
        # Debris of an interrupted save of this series; write_atomic only
        # clears it when the very same path is written again.
        prefix = f"{name}-"
        for entry in self._fs.listdir(self._root):
            if self._seq_of(entry, prefix, _SUFFIX + _TMP_SUFFIX) is not None:
                self._fs.remove(os.path.join(self._root, entry))
                removed = True
        if removed:
            self._fs.sync_dir(self._root)
