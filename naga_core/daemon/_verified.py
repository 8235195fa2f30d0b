"""Which sealed segments the core's background rehash verified, and when
(``ledger/sealed-verified.json``; docs/adr/0061-flat19b-reload-once-paced-rehash.md).

An entry names a segment, the SHA-256 of the two hashes its signed seal
holds (the segment's and its index's) and the wall time of the rehash that
found them matching. A segment is due for its rehash again once its
interval has passed: between half and all of ``ledger.reverify_days``,
fixed per segment by its name, so that segments verified together (a first
start) come due on different days instead of all at once.

The file is never a reason to trust more than the signed seals and the
per-record checks give: a file that is missing, does not parse, fails its
checksum or has another version means every segment is due; an entry whose
seal hashes differ (the seal is not the one verified), or dated after now,
is due. Written whole to a temporary file and renamed (not synced: a lost
or torn write only means "verify again").
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from naga_core.ledger import Seal

#: The file's format; another is read as no file (every segment due).
VERIFIED_VERSION = 1
_DAY_NS = 86_400 * 1_000_000_000


@dataclass(frozen=True, slots=True)
class Verified:
    """One segment's last rehash that matched its seal."""

    seal: bytes  # seal_digest() of the seal it matched
    at_ns: int


def seal_digest(seal: Seal) -> bytes:
    """What an entry binds: the hashes the signed seal holds."""
    return hashlib.sha256(seal.segment_sha256 + seal.index_sha256).digest()


def interval_ns(segment: str, days: int) -> int:
    """How long a segment's rehash counts: between half and all of ``days``
    (0 days: none), by its name."""
    spread = int.from_bytes(hashlib.sha256(segment.encode()).digest()[:8], "big") / 2.0**64
    return int(days * _DAY_NS * (1.0 - spread / 2))


class VerifiedList:
    """The entries of ``path`` (see the module doc)."""

    def __init__(self, path: str, entries: dict[str, Verified] | None = None) -> None:
        self.path = path
        self.entries: dict[str, Verified] = dict(entries or {})

    @classmethod
    def load(cls, path: str) -> tuple[VerifiedList, str | None]:
        """The list at ``path``, and why it was not usable (then empty: every
        segment is due); a missing file is an empty list without a why."""
        try:
            with open(path, "rb") as f:
                data = f.read(1 << 20)
        except FileNotFoundError:
            return cls(path), None
        except OSError as exc:
            return cls(path), f"unreadable ({exc.strerror})"
        try:
            doc = json.loads(data)
            entries = _entries(doc)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return cls(path), f"unusable ({exc})"
        return cls(path, entries), None

    def due(self, seals: Iterable[Seal], now_ns: int, days: int) -> list[Seal]:
        """Of ``seals``, those whose rehash is due at ``now_ns``."""
        return [s for s in seals if self._due_at(s, days) <= now_ns or self._future(s, now_ns)]

    def next_due_ns(self, seals: Iterable[Seal], days: int) -> int | None:
        """When the next of ``seals`` comes due (None: none are known)."""
        return min((self._due_at(s, days) for s in seals), default=None)

    def _due_at(self, seal: Seal, days: int) -> int:
        entry = self.entries.get(seal.segment)
        if entry is None or entry.seal != seal_digest(seal):
            return 0
        return entry.at_ns + interval_ns(seal.segment, days)

    def _future(self, seal: Seal, now_ns: int) -> bool:
        entry = self.entries.get(seal.segment)
        return entry is not None and entry.at_ns > now_ns

    def mark(self, seal: Seal, now_ns: int) -> None:
        self.entries[seal.segment] = Verified(seal_digest(seal), now_ns)

    def keep_only(self, seals: Iterable[Seal]) -> None:
        """Forget entries of segments the ledger does not have."""
        names = {s.segment for s in seals}
        self.entries = {k: v for k, v in self.entries.items() if k in names}

    def save(self) -> None:
        """Write the list (OSError raised; the caller logs it)."""
        body = {k: {"seal": v.seal.hex(), "at_ns": v.at_ns} for k, v in self.entries.items()}
        doc = {"version": VERIFIED_VERSION, "segments": body, "sha256": _checksum(body)}
        tmp = f"{self.path}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, sort_keys=True)
        os.replace(tmp, self.path)


def _checksum(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


def _entries(doc: Any) -> dict[str, Verified]:
    if not isinstance(doc, dict):
        raise TypeError("not an object")
    top = cast(dict[str, Any], doc)
    if top.get("version") != VERIFIED_VERSION:
        raise ValueError(f"not version {VERIFIED_VERSION}")
    body = top["segments"]
    if not isinstance(body, dict) or top.get("sha256") != _checksum(cast(dict[str, Any], body)):
        raise ValueError("its checksum does not match")
    out: dict[str, Verified] = {}
    for name, entry in cast(dict[str, Any], body).items():
        if not isinstance(entry, dict):
            raise TypeError(f"a bad entry for {name!r}")
        fields = cast(dict[str, Any], entry)
        seal, at = fields["seal"], fields["at_ns"]
        if not isinstance(seal, str) or type(at) is not int:
            raise ValueError(f"a bad entry for {name!r}")
        out[name] = Verified(bytes.fromhex(seal), at)
    return out


__all__ = ["VERIFIED_VERSION", "Verified", "VerifiedList", "interval_ns", "seal_digest"]
