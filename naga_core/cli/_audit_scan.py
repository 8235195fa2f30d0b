"""``naga audit``'s one pass over the ledger's records: outstanding tokens,
the last rollback, and the jobs, skills and memory: what is there now and
what changed last, by whom and when (ids, names and effect kinds; a memory
item's subject and writer, never its text: memory is sealed and audit
never opens it).

The same records come from the running core (its ledger pages) or from a
stopped core's ledger read without opening it (naga_core.ledger.LedgerView).
Kernel state is the fold of every effect's forward ops, rollbacks included
(a rollback's forward ops are its undo), so what is "there now" here is
what the kernel holds.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from google.protobuf.message import DecodeError

from naga import values
from naga.constants import KERNEL_EFFECT_KIND
from naga.v1 import authz_pb2 as zpb
from naga.v1 import job_pb2 as jpb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import memory_pb2 as mmpb
from naga_core.authz import MINTED_KIND, REVOKED_FAMILY
from naga_core.memory import FORGET, ITEM, LIVE, REFUSED
from naga_core.scheduler import JOB_FAMILY
from naga_core.skills import ARCHIVED_FAMILY, REF_FAMILY, Commit, SkillError

#: Changes listed per area (the newest).
RECENT = 10
_AREAS = {JOB_FAMILY: "jobs", REF_FAMILY: "skills", ARCHIVED_FAMILY: "skills", LIVE: "memory"}


class Seen(Protocol):
    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def timestamp_ns(self) -> int: ...


def _form(effect: kpb.Effect) -> str:
    return kpb.EffectForm.Name(effect.form).removeprefix("EFFECT_FORM_").lower()


class AuditScan:
    """Fed every record in order (:meth:`see`), then read (:meth:`report`).
    ``blob``: a skill commit's bytes by digest (who changed a skill), None
    when it cannot be read."""

    def __init__(self, blob: Callable[[bytes], bytes | None]) -> None:
        self._blob = blob
        self._minted: dict[bytes, tuple[str, int | None]] = {}
        self._revoked: set[str] = set()
        self.last_rollback: dict[str, Any] | None = None
        self._state: dict[str, dict[str, bytes | bool]] = {f: {} for f in _AREAS}
        self._changes: dict[str, deque[dict[str, Any]]] = {
            a: deque(maxlen=RECENT) for a in ("jobs", "skills", "memory")
        }
        self._memory_items = 0
        self._forgotten = 0
        self._refused = 0
        self._subjects: dict[str, str] = {}  # live item id -> subject

    def see(self, r: Seen) -> None:
        if r.kind == MINTED_KIND:
            try:
                m = zpb.TokenMinted.FromString(r.payload)
            except DecodeError:
                return
            expires = m.expires_at_ns if m.HasField("expires_at_ns") else None
            self._minted[m.id] = (m.role or "role-less", expires)
        elif r.kind == KERNEL_EFFECT_KIND:
            try:
                effect = kpb.Effect.FromString(r.payload)
            except DecodeError:
                return
            self._effect(r, effect)
        elif r.kind in (ITEM, FORGET, REFUSED):
            self._memory(r)

    def _effect(self, r: Seen, effect: kpb.Effect) -> None:
        touched: dict[str, list[str]] = {}
        for op in effect.forward:
            if op.family == REVOKED_FAMILY:
                (self._revoked.add if op.HasField("value") else self._revoked.discard)(op.key)
            area = _AREAS.get(op.family)
            if area is None:
                continue
            family = self._state[op.family]
            if op.HasField("value"):
                value = values.from_value(op.value)
                family[op.key] = value if isinstance(value, bytes | bool) else True
            else:
                family.pop(op.key, None)
            if op.family != LIVE:  # memory's own records say more than its effects
                touched.setdefault(area, []).append(op.key)
        if effect.form == kpb.EFFECT_FORM_ROLLBACK:
            self.last_rollback = {
                "seq": r.seq,
                "to_seq": effect.rollback_to,
                "through_seq": effect.rollback_through,
                "irreversible_kept": len(effect.irreversible_seqs),
            }
        for area, keys in touched.items():
            for key in dict.fromkeys(keys):
                self._changes[area].append(self._change(r, effect, area, key))

    def _change(self, r: Seen, effect: kpb.Effect, area: str, key: str) -> dict[str, Any]:
        row: dict[str, Any] = {
            "seq": r.seq,
            "time_ns": r.timestamp_ns,
            "effect": _form(effect),
            "id" if area == "jobs" else "skill": key,
        }
        if area == "jobs":
            raw = self._state[JOB_FAMILY].get(key)
            row["change"] = "removed" if raw is None else "set"
            if isinstance(raw, bytes):
                try:
                    job = jpb.Job.FromString(raw)
                except DecodeError:
                    job = None
                if job is not None:
                    row["by"] = job.creator or "owner"
                    row["paused"] = job.paused
        else:
            digest = self._state[REF_FAMILY].get(key)
            raw = self._blob(digest) if isinstance(digest, bytes) else None
            if raw is not None:
                try:
                    commit = Commit.decode(raw)
                    row["by"], row["change"] = commit.author, commit.action
                except SkillError:
                    row["change"] = "its commit does not decode"
            if self._state[ARCHIVED_FAMILY].get(key) is True:
                row["archived"] = True
        if effect.form == kpb.EFFECT_FORM_ROLLBACK:
            row["change"] = "rolled back"
        return row

    def _memory(self, r: Seen) -> None:
        try:
            if r.kind == ITEM:
                item = mmpb.MemoryItemRecord.FromString(r.payload)
                self._memory_items += 1
                self._subjects[item.id] = item.subject
                row = {
                    "change": "written",
                    "id": item.id,
                    "subject": item.subject,
                    "by": f"{item.writer_trust} in session {item.session}",
                }
            elif r.kind == FORGET:
                gone = mmpb.MemoryForgetRecord.FromString(r.payload)
                self._forgotten += gone.items
                row = {"change": "forgotten", "subject": gone.subject, "items": gone.items}
            else:
                ref = mmpb.MemoryRefusalRecord.FromString(r.payload)
                self._refused += 1
                reason = mmpb.MemoryRefusalReason.Name(ref.reason)
                row = {
                    "change": "refused",
                    "subject": ref.subject,
                    "by": f"{ref.writer} ({ref.writer_trust})",
                    "reason": reason.removeprefix("MEMORY_REFUSAL_REASON_").lower(),
                }
        except DecodeError:
            return
        self._changes["memory"].append({"seq": r.seq, "time_ns": r.timestamp_ns, **row})

    # --- the report -------------------------------------------------------------------

    def tokens(self, now_ns: int | None = None) -> dict[str, Any]:
        now = time.time_ns() if now_ns is None else now_ns
        by_role: dict[str, int] = {}
        for tid, (role, expires) in self._minted.items():
            if tid.hex() in self._revoked or (expires is not None and expires <= now):
                continue
            by_role[role] = by_role.get(role, 0) + 1
        return {"outstanding": sum(by_role.values()), "by_role": by_role}

    def jobs(self) -> dict[str, Any]:
        rows: list[dict[str, Any]] = []
        for job_id, raw in sorted(self._state[JOB_FAMILY].items()):
            row: dict[str, Any] = {"id": job_id}
            if isinstance(raw, bytes):
                try:
                    job = jpb.Job.FromString(raw)
                    row.update(
                        cron=job.cron, tz=job.tz, by=job.creator or "owner", paused=job.paused
                    )
                except DecodeError:
                    row["problem"] = "does not decode"
            rows.append(row)
        return {
            "count": len(rows),
            "paused": sum(1 for r in rows if r.get("paused")),
            "jobs": rows,
            "changes": list(self._changes["jobs"]),
        }

    def skills(self) -> dict[str, Any]:
        refs = self._state[REF_FAMILY]
        archived = {k for k, v in self._state[ARCHIVED_FAMILY].items() if v is True}
        return {
            "count": len(refs),
            "archived": len(archived & set(refs)),
            "skills": sorted(refs),
            "changes": list(self._changes["skills"]),
        }

    def memory(self) -> dict[str, Any]:
        live = self._state[LIVE]
        subjects: dict[str, int] = {}
        for item_id in live:
            subject = self._subjects.get(item_id, "?")
            subjects[subject] = subjects.get(subject, 0) + 1
        return {
            "live_items": len(live),
            "written": self._memory_items,
            "forgotten": self._forgotten,
            "refused": self._refused,
            "by_subject": dict(sorted(subjects.items())),
            "changes": list(self._changes["memory"]),
        }


__all__ = ["RECENT", "AuditScan"]
