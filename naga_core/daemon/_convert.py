"""Kernel and ledger values to their proto messages (and typed values back)."""

from __future__ import annotations

from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import ledger_pb2 as lpb
from naga.values import Scalar, to_value
from naga_core.daemon._errors import RequestRefused
from naga_core.kernel import Change, RollbackPreview, SettingInfo, TrustLevel
from naga_core.ledger import Record

_SETTING_KINDS = {
    "integer": cpb.SETTING_KIND_INTEGER,
    "real": cpb.SETTING_KIND_REAL,
    "text": cpb.SETTING_KIND_TEXT,
    "flag": cpb.SETTING_KIND_FLAG,
    "choice": cpb.SETTING_KIND_CHOICE,
}

_TRUST_TO_PB = {
    TrustLevel.UNTRUSTED: cpb.TRUST_LEVEL_UNTRUSTED,
    TrustLevel.GUEST: cpb.TRUST_LEVEL_GUEST,
    TrustLevel.KNOWN: cpb.TRUST_LEVEL_KNOWN,
    TrustLevel.OWNER: cpb.TRUST_LEVEL_OWNER,
}
_TRUST_FROM_PB = {v: k for k, v in _TRUST_TO_PB.items()}


def value(v: Scalar) -> kpb.Value:
    return to_value(v)


def scalar(field: str, v: kpb.Value) -> Scalar:
    which = v.WhichOneof("kind")
    if which is None:
        raise RequestRefused.invalid(f"{field} has no value set")
    result: Scalar = getattr(v, which)
    return result


def setting(info: SettingInfo) -> cpb.Setting:
    return cpb.Setting(
        name=info.name,
        kind=_SETTING_KINDS.get(info.kind, cpb.SETTING_KIND_UNSPECIFIED),
        value=value(info.value),
        default=value(info.default),
        explicit=info.explicit,
        rule=info.rule,
        doc=info.doc,
        problem=info.problem or "",
    )


def trust_level(level: TrustLevel) -> cpb.TrustLevel.ValueType:
    return _TRUST_TO_PB[level]


def trust_level_from(field: str, level: int) -> TrustLevel:
    found = _TRUST_FROM_PB.get(level)  # type: ignore[call-overload]
    if found is None:
        names = ", ".join(cpb.TrustLevel.Name(v) for v in _TRUST_FROM_PB)
        raise RequestRefused.invalid(f"{field} {level} is not a trust level (one of: {names})")
    return found


def change(c: Change) -> cpb.StateChange:
    msg = cpb.StateChange(family=c.family, key=c.key)
    if c.before is not None:
        msg.before.CopyFrom(value(c.before))
    if c.after is not None:
        msg.after.CopyFrom(value(c.after))
    return msg


def preview(p: RollbackPreview) -> cpb.RollbackPreview:
    return cpb.RollbackPreview(
        to_seq=p.to_seq,
        through_seq=p.through_seq,
        effects=p.effects,
        changes=[change(c) for c in p.changes],
        world_actions=list(p.world_actions),
        irreversible_seqs=list(p.irreversible),
        kept_seqs=list(p.kept),
    )


def record(r: Record) -> lpb.Record:
    return lpb.Record(
        seq=r.seq,
        timestamp_ns=r.timestamp_ns,
        kind=r.kind,
        payload=r.payload,
        blob_refs=list(r.blob_refs),
        prev_hash=r.prev_hash,
        leaf_hash=r.leaf_hash,
    )


__all__ = [
    "change",
    "preview",
    "record",
    "scalar",
    "setting",
    "trust_level",
    "trust_level_from",
    "value",
]
