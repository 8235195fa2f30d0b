"""The client's calls of the KernelService (history, rollback, settings,
trust) and of the SupervisorService."""

from __future__ import annotations

import contextlib

from naga.sdk import errors
from naga.sdk._rpc import Rpc
from naga.tokens import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.values import Scalar, to_value

_KERNEL = "/naga.v1.KernelService/"
_SUPERVISOR = "/naga.v1.SupervisorService/"

_TRUST_LEVELS = {
    "untrusted": cpb.TRUST_LEVEL_UNTRUSTED,
    "guest": cpb.TRUST_LEVEL_GUEST,
    "known": cpb.TRUST_LEVEL_KNOWN,
    "owner": cpb.TRUST_LEVEL_OWNER,
}


def trust_level(
    level: str | TrustLevel | cpb.TrustLevel.ValueType,
) -> cpb.TrustLevel.ValueType:
    """A trust level given as a label, a :class:`TrustLevel` or the enum."""
    if isinstance(level, TrustLevel):
        return cpb.TrustLevel.ValueType(int(level) + cpb.TRUST_LEVEL_UNTRUSTED)
    if isinstance(level, str):
        found = _TRUST_LEVELS.get(level)
        if found is None:
            labels = ", ".join(_TRUST_LEVELS)
            raise errors.InvalidArgument(f"{level!r} is not a trust level (one of: {labels})")
        return found
    return level


class KernelCalls(Rpc):
    # --- kernel -------------------------------------------------------------------

    def history(
        self, limit: int = 0, before_seq: int | None = None, *, timeout: float | None = None
    ) -> cpb.HistoryResponse:
        """Recent entries, newest first (``limit`` 0: the core's default of 50)."""
        req = cpb.HistoryRequest(limit=limit)
        if before_seq is not None:
            req.before_seq = before_seq
        return self._read(_KERNEL + "History", req, cpb.HistoryResponse, timeout)

    def rollback(
        self,
        to_seq: int,
        *,
        dry_run: bool = False,
        by_owner: bool = False,
        timeout: float | None = None,
    ) -> cpb.RollbackResponse:
        """Keep entry ``to_seq`` and undo every later effect (-1: all), or
        with ``dry_run`` only preview it. ``by_owner`` asserts the owner's
        authority, which a rollback that raises a privilege needs."""
        req = cpb.RollbackRequest(to_seq=to_seq, dry_run=dry_run, by_owner=by_owner)
        return self._call(
            _KERNEL + "Rollback", req, cpb.RollbackResponse, read=dry_run, timeout=timeout
        )

    def get_setting(self, name: str, *, timeout: float | None = None) -> cpb.Setting:
        req = cpb.GetSettingRequest(name=name)
        return self._read(_KERNEL + "GetSetting", req, cpb.Setting, timeout)

    def list_settings(self, *, timeout: float | None = None) -> list[cpb.Setting]:
        req = cpb.ListSettingsRequest()
        answer = self._read(_KERNEL + "ListSettings", req, cpb.ListSettingsResponse, timeout)
        return list(answer.settings)

    def set_setting(
        self, name: str, value: Scalar, *, timeout: float | None = None
    ) -> cpb.SetSettingResponse:
        """Set a typed value (it must be of the setting's kind)."""
        return self._set(cpb.SetSettingRequest(name=name, value=to_value(value)), timeout)

    def set_setting_text(
        self, name: str, text: str, *, timeout: float | None = None
    ) -> cpb.SetSettingResponse:
        """Set from text, parsed by the setting's kind (as ``naga config set``)."""
        return self._set(cpb.SetSettingRequest(name=name, text=text), timeout)

    def reset_setting(self, name: str, *, timeout: float | None = None) -> cpb.SetSettingResponse:
        """Remove the registered value; the default applies again."""
        return self._set(cpb.SetSettingRequest(name=name, reset=True), timeout)

    def _set(self, req: cpb.SetSettingRequest, timeout: float | None) -> cpb.SetSettingResponse:
        return self._write(_KERNEL + "SetSetting", req, cpb.SetSettingResponse, timeout)

    def get_trust(self, peer: str, *, timeout: float | None = None) -> cpb.TrustEntry:
        req = cpb.GetTrustRequest(peer=peer)
        return self._read(_KERNEL + "GetTrust", req, cpb.TrustEntry, timeout)

    def set_trust(
        self,
        peer: str,
        level: str | cpb.TrustLevel.ValueType,
        *,
        by_owner: bool = False,
        reason: str = "",
        timeout: float | None = None,
    ) -> cpb.SetTrustResponse:
        """Set a peer's level (a label such as ``"known"``, or the enum).
        Raising needs ``by_owner`` (INV-6)."""
        req = cpb.SetTrustRequest(
            peer=peer, level=trust_level(level), by_owner=by_owner, reason=reason
        )
        return self._write(_KERNEL + "SetTrust", req, cpb.SetTrustResponse, timeout)

    def list_trust(self, *, timeout: float | None = None) -> list[cpb.TrustEntry]:
        req = cpb.ListTrustRequest()
        answer = self._read(_KERNEL + "ListTrust", req, cpb.ListTrustResponse, timeout)
        return list(answer.entries)

    # --- supervisor ---------------------------------------------------------------

    def status(self, *, timeout: float | None = None) -> cpb.StatusResponse:
        """The processes the core supervises (the core first)."""
        return self._read(_SUPERVISOR + "Status", cpb.StatusRequest(), cpb.StatusResponse, timeout)

    def shutdown(self, reason: str = "", *, timeout: float | None = None) -> None:
        """Ask the core to stop gracefully (returns once it accepted)."""
        req = cpb.ShutdownRequest(reason=reason)
        # The core may cancel this very call as it stops (it began to stop
        # because of it): that is the answer asked for.
        with contextlib.suppress(errors.CoreCancelled):
            self._write(_SUPERVISOR + "Shutdown", req, cpb.ShutdownResponse, timeout)

    def restart_gateway(
        self, reason: str = "", *, timeout: float | None = None
    ) -> cpb.RestartGatewayResponse:
        """Restart the core's gateway on its current port with its failures
        forgotten (as after freeing the port another program held); owner
        only. Returns once that attempt served (``serving``, ``url``) or
        failed (``cause``); the core keeps supervising it either way.
        FailedPrecondition when the core runs without a gateway."""
        req = cpb.RestartGatewayRequest(reason=reason)
        return self._write(_SUPERVISOR + "RestartGateway", req, cpb.RestartGatewayResponse, timeout)


__all__ = ["KernelCalls", "trust_level"]
