"""``naga.v1.KernelService``: history, rollback, settings and trust.

``check_*`` functions run on the server thread and look only at the
request; handlers run on the trio loop and may look at the core.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from naga.v1 import authz_pb2 as zpb
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga_core.agent import describe_turn_record
from naga_core.authz import MINTED_KIND, describe_minted
from naga_core.daemon import _checks, _convert
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import Method, Unary
from naga_core.daemon._core import Core
from naga_core.daemon._errors import RequestRefused
from naga_core.kernel import (
    APPLIED_KIND,
    EFFECT_KIND,
    MAX_NAME_CHARS,
    MAX_PEER_CHARS,
    TRUST_FAMILY,
    RollbackPreview,
)
from naga_core.ledger import Record

SERVICE = "naga.v1.KernelService"
HISTORY_DEFAULT = 50
MAX_SETTING_TEXT = 1024
MAX_REASON_CHARS = 500


class KernelServicer:
    """The handlers, bound to one core."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def methods(self) -> list[Method]:
        return [
            Unary("History", cpb.HistoryRequest, self.history, check_history),
            Unary("Rollback", cpb.RollbackRequest, self.rollback, check_rollback),
            Unary("GetSetting", cpb.GetSettingRequest, self.get_setting, check_get_setting),
            Unary("SetSetting", cpb.SetSettingRequest, self.set_setting, check_set_setting),
            Unary("ListSettings", cpb.ListSettingsRequest, self.list_settings),
            Unary("GetTrust", cpb.GetTrustRequest, self.get_trust, check_get_trust),
            Unary("SetTrust", cpb.SetTrustRequest, self.set_trust, check_set_trust),
            Unary("ListTrust", cpb.ListTrustRequest, self.list_trust),
        ]

    # --- history and rollback ------------------------------------------------------

    def history(self, _p: Principal, req: cpb.HistoryRequest) -> cpb.HistoryResponse:
        ledger = self._core.ledger
        limit = _checks.page_limit("limit", req.limit, default=HISTORY_DEFAULT)
        before = ledger.size
        if req.HasField("before_seq"):
            before = _checks.seq_at_most("before_seq", req.before_seq, ledger.size)
        entries: list[cpb.HistoryEntry] = []
        seq = before - 1
        # Markers are at most one per effect, so this bounds the reads.
        budget = 2 * limit + 2
        while seq >= 0 and len(entries) < limit and budget > 0:
            rec = ledger.read(seq)
            if rec.kind != APPLIED_KIND:
                entries.append(_entry(rec))
            seq -= 1
            budget -= 1
        return cpb.HistoryResponse(entries=entries, more=seq >= 0, next_before_seq=seq + 1)

    def rollback(self, p: Principal, req: cpb.RollbackRequest) -> cpb.RollbackResponse:
        kernel = self._core.kernel
        size = self._core.ledger.size
        if req.to_seq >= size:
            raise RequestRefused.out_of_range(
                f"to_seq {req.to_seq} is past the ledger's end (the last entry is {size - 1})"
            )
        if req.dry_run:
            return cpb.RollbackResponse(
                preview=_convert.preview(kernel.preview_rollback(req.to_seq))
            )
        by_owner = _owner_asserted(p, req.by_owner)

        def roll_back() -> tuple[int, RollbackPreview]:
            done = kernel.rollback(req.to_seq, by_owner=by_owner)
            self._core.rolled_back()
            return done

        seq, preview = self._core.write(roll_back)
        return cpb.RollbackResponse(preview=_convert.preview(preview), seq=seq)

    # --- settings ----------------------------------------------------------------------

    def _setting(self, name: str) -> cpb.Setting:
        self._core.settings.spec(name)  # UnknownSetting (NOT_FOUND) names the known ones
        (row,) = (r for r in self._core.settings.describe() if r.name == name)
        return _convert.setting(row)

    def get_setting(self, _p: Principal, req: cpb.GetSettingRequest) -> cpb.Setting:
        return self._setting(req.name)

    def set_setting(self, _p: Principal, req: cpb.SetSettingRequest) -> cpb.SetSettingResponse:
        settings = self._core.settings
        spec = settings.spec(req.name)
        which = req.WhichOneof("change")
        if which == "reset":
            seq = self._core.write(lambda: settings.reset(req.name))
        else:
            typed = spec.parse(req.text) if which == "text" else _convert.scalar("value", req.value)
            seq = self._core.write(lambda: settings.set(req.name, typed))
        response = cpb.SetSettingResponse(setting=self._setting(req.name))
        if seq is not None:
            response.seq = seq
        return response

    def list_settings(
        self, _p: Principal, _req: cpb.ListSettingsRequest
    ) -> cpb.ListSettingsResponse:
        rows = self._core.settings.describe()
        return cpb.ListSettingsResponse(settings=[_convert.setting(r) for r in rows])

    # --- trust ---------------------------------------------------------------------------

    def _trust_entry(self, peer: str) -> cpb.TrustEntry:
        level = self._core.trust.level(peer)  # InvalidPeer (INVALID_ARGUMENT) first
        explicit = self._core.kernel.state.get((TRUST_FAMILY, peer)) is not None
        return cpb.TrustEntry(peer=peer, level=_convert.trust_level(level), explicit=explicit)

    def get_trust(self, _p: Principal, req: cpb.GetTrustRequest) -> cpb.TrustEntry:
        return self._trust_entry(req.peer)

    def set_trust(self, p: Principal, req: cpb.SetTrustRequest) -> cpb.SetTrustResponse:
        trust = self._core.trust
        level = _convert.trust_level_from("level", req.level)
        by_owner = _owner_asserted(p, req.by_owner)
        seq = self._core.write(
            lambda: trust.set(req.peer, level, by_owner=by_owner, reason=req.reason)
        )
        response = cpb.SetTrustResponse(entry=self._trust_entry(req.peer))
        if seq is not None:
            response.seq = seq
        return response

    def list_trust(self, _p: Principal, _req: cpb.ListTrustRequest) -> cpb.ListTrustResponse:
        return cpb.ListTrustResponse(
            entries=[
                cpb.TrustEntry(peer=e.peer, level=_convert.trust_level(e.level), explicit=True)
                for e in self._core.trust.entries()
            ]
        )


def _owner_asserted(p: Principal, asserted: bool) -> bool:
    if asserted and not p.owner:
        raise RequestRefused.denied(f"by_owner is only honoured for the owner, not {p.name}")
    return asserted


def _entry(rec: Record) -> cpb.HistoryEntry:
    entry = cpb.HistoryEntry(seq=rec.seq, timestamp_ns=rec.timestamp_ns, kind=rec.kind)
    if rec.kind == EFFECT_KIND:
        effect = kpb.Effect()
        try:
            effect.ParseFromString(rec.payload)
        except DecodeError:
            entry.description = "(unreadable effect)"
            return entry
        entry.description = effect.description
        entry.form = effect.form
        entry.irreversible = effect.irreversible
        entry.rollback_to = effect.rollback_to
    elif rec.kind == MINTED_KIND:
        try:
            entry.description = describe_minted(zpb.TokenMinted.FromString(rec.payload))
        except DecodeError:
            entry.description = "(unreadable token record)"
    else:
        entry.description = describe_turn_record(rec.kind, rec.payload)
    return entry


# --- request checks (server thread) ------------------------------------------------------


def check_history(req: cpb.HistoryRequest) -> None:
    _checks.page_limit("limit", req.limit, default=HISTORY_DEFAULT)


def check_rollback(req: cpb.RollbackRequest) -> None:
    if req.to_seq < -1:
        raise RequestRefused.invalid(
            f"to_seq {req.to_seq} is not a ledger seq (use -1 to undo everything)"
        )


def _check_name(name: str) -> None:
    _checks.text("name", name, max_chars=MAX_NAME_CHARS)


def check_get_setting(req: cpb.GetSettingRequest) -> None:
    _check_name(req.name)


def check_set_setting(req: cpb.SetSettingRequest) -> None:
    _check_name(req.name)
    which = req.WhichOneof("change")
    if which is None:
        raise RequestRefused.invalid("one of value, text or reset is required")
    if which == "reset" and not req.reset:
        raise RequestRefused.invalid("reset must be true when given")
    if which == "text":
        _checks.text("text", req.text, max_chars=MAX_SETTING_TEXT, required=False)
    if which == "value":
        _convert.scalar("value", req.value)


def _check_peer(peer: str) -> None:
    # The full rule is the trust table's (InvalidPeer); this bounds the work first.
    _checks.text("peer", peer, max_chars=MAX_PEER_CHARS)


def check_get_trust(req: cpb.GetTrustRequest) -> None:
    _check_peer(req.peer)


def check_set_trust(req: cpb.SetTrustRequest) -> None:
    _check_peer(req.peer)
    _convert.trust_level_from("level", req.level)
    _checks.text("reason", req.reason, max_chars=MAX_REASON_CHARS, required=False)


__all__ = ["SERVICE", "KernelServicer"]
