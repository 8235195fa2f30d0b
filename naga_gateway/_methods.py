"""The request methods of one connected peer: each protocol method's
handler, what it may see checked against the peer's trust.

Apart from the connection (naga_gateway._conn) because the two change for
different reasons: the connection is framing, the handshake, the rate and
in-flight limits and the event pump, the same for every method; these are
what each method asks of the core and shows the peer, and grow with the
protocol. The connection builds one :class:`Methods` once ``connect`` has
fixed the peer, and calls :attr:`Methods.HANDLERS` for every later request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import trio

from naga.constants import MAX_PAGE_ENTRIES
from naga.rollbacks import undone_ranges
from naga.trust import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import turn_pb2 as tpb
from naga.values import from_value
from naga_gateway import _admin, _pages, _skills
from naga_gateway import _protocol as p
from naga_gateway._core import CorePort
from naga_gateway._hub import Hub, Peer
from naga_gateway._lanes import Inbound, Lanes, Ticket
from naga_gateway.errors import CoreCallFailed, FrameInvalid

log = logging.getLogger("naga.gateway")

Handler = Callable[[Any, Any], Awaitable[dict[str, Any]]]


class Methods:
    """The handlers of one connected peer's requests."""

    def __init__(
        self, core: CorePort, lanes: Lanes, hub: Hub, peer: Peer, owner_session: str
    ) -> None:
        """``owner_session``: the owner's console cookie, passed with each
        owner change for the core to check again ("" for any other peer)."""
        self._core = core
        self._lanes = lanes
        self._hub = hub
        self.peer = peer
        self._owner_session = owner_session

    def check_session(self, session: str) -> None:
        if not self.peer.may_use(session):
            raise FrameInvalid(
                f"peer {self.peer.id} may only use sessions named {self.peer.session_prefix}*",
                p.FORBIDDEN,
            )

    async def _m_connect(self, _params: Any) -> dict[str, Any]:
        raise FrameInvalid("already connected", p.INVALID_PARAMS)

    async def _m_send(self, params: p.SendParams) -> dict[str, Any]:
        self.check_session(params.session)
        inbound = Inbound(
            params.session, params.text, params.key, self.peer.id, params.mode, self.peer.level
        )
        return await self.acked(self._lanes.enqueue(inbound))

    async def acked(self, ticket: Ticket) -> dict[str, Any]:
        ack = await self._lanes.wait(ticket)
        return {
            "message_seq": ack.message_seq,
            "turn": ack.turn_id,
            "steered": ack.steered,
            "replayed": ack.replayed,
        }

    async def _m_abort(self, params: p.SessionParams) -> dict[str, Any]:
        self.check_session(params.session)
        return {"turn": await self._lanes.abort(params.session)}

    async def _m_sessions(self, params: p.ListParams) -> dict[str, Any]:
        resp = await self._core.list_sessions(params.limit, params.include_archived)
        return {
            "sessions": [
                {
                    "session": s.session,
                    "title": s.title,
                    "archived": s.archived,
                    "turns": s.turns,
                    "last_seq": s.last_seq,
                    "last_time_ns": s.last_time_ns,
                    "preview": s.preview,
                    "running": self._lanes.running(s.session),
                }
                for s in resp.sessions
                if self.peer.may_use(s.session)
            ]
        }

    async def _m_history(self, params: p.HistoryParams) -> dict[str, Any]:
        self.check_session(params.session)
        resp = await self._core.history(params.session, params.limit)
        owner = self.peer.level is TrustLevel.OWNER
        entries = [
            {
                "seq": e.seq,
                "role": "user" if e.role == tpb.HISTORY_ROLE_USER else "assistant",
                "text": e.text,
                "peer": e.peer,
                "time_ns": e.time_ns,
                "turn": e.turn_id,
            }
            for e in resp.entries
            # Another peer's message is shown only to those who may see it.
            if owner or e.role != tpb.HISTORY_ROLE_USER or e.peer == self.peer.id
        ]
        if not resp.entries:
            return {"session": params.session, "entries": entries}
        # The tool calls and the rollbacks are read at once: each is its own
        # round trips to the core, and the console waits for this answer.
        found: dict[str, Any] = {"entries": entries, "dead": []}

        async def detail() -> None:
            if params.detail and owner and entries:
                found["entries"] = await self._detailed(params.session, entries)

        async def undone() -> None:  # append-only: a rolled-back turn is shown, marked undone
            found["dead"] = await self._undone(min(e.seq for e in resp.entries))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(detail)
            nursery.start_soon(undone)
        dead: list[tuple[int, int]] = found["dead"]
        entries = found["entries"]
        for e in entries:
            seq = int(e["seq"])
            e["undone"] = any(t < seq < at for t, at in dead)
        return {"session": params.session, "entries": entries}

    async def _detailed(self, session: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``entries`` with the session's tool calls, errors and aborts
        between them and each reply's usage, read from the ledger from the
        first entry on (at most ``DETAIL_SCAN`` records)."""
        records: list[Any] = []
        at = entries[0]["seq"]
        while len(records) < _pages.DETAIL_SCAN:
            try:
                page = await self._core.records(at, 512)
            except CoreCallFailed:
                return entries  # the plain history is still the truth
            if not page:
                break
            records.extend(page)
            at = page[-1].seq + 1
        detail = _pages.turn_detail(session, records)
        merged = {e["seq"]: e for e in entries}
        for seq, extra in detail.items():
            if seq in merged:
                merged[seq] = merged[seq] | extra
            elif "role" in extra:
                merged[seq] = extra
        return [merged[s] for s in sorted(merged)]

    def _owner_only(self, what: str) -> None:
        if self.peer.level is not TrustLevel.OWNER:
            raise FrameInvalid(f"peer {self.peer.id} may not read {what}", p.FORBIDDEN)

    async def _m_settings(self, _params: p.NoParams) -> dict[str, Any]:
        self._owner_only("the settings")
        return _pages.settings(await self._core.list_settings())

    async def _m_plugins(self, _params: p.NoParams) -> dict[str, Any]:
        self._owner_only("the plugins")
        return _pages.plugins(await self._core.list_plugins())

    async def _m_trust(self, _params: p.NoParams) -> dict[str, Any]:
        self._owner_only("the trust table")
        return _pages.trust(await self._core.list_trust())

    async def _m_ledger(self, params: p.LedgerParams) -> dict[str, Any]:
        self._owner_only("the ledger")
        return _pages.ledger(await self._core.ledger_history(params.limit, params.before_seq))

    async def _m_tools(self, _params: p.NoParams) -> dict[str, Any]:
        risks = await self._core.tool_risks()
        self._hub.tool_risk.update(risks)
        pol = self.peer.policy
        shown = [
            {"name": name, "risk": risk}
            for name, risk in sorted(risks.items())
            if pol.tool_visible(risk)
        ]
        return {"tools": shown}

    async def _rollback(self, params: p.RollbackParams, dry_run: bool) -> dict[str, Any]:
        if not self.peer.policy.may_rollback:
            raise FrameInvalid(f"peer {self.peer.id} may not roll back", p.FORBIDDEN)
        resp = await self._core.rollback(params.to_seq, dry_run=dry_run)
        preview = _preview(resp.preview)
        if dry_run:
            preview.update(await self._in_words(resp.preview))
        return {"preview": preview, "seq": resp.seq if resp.HasField("seq") else None}

    async def _undone(self, oldest: int) -> list[tuple[int, int]]:
        """The ranges (kept, rollback) of records a rollback in force undid,
        newer than ``oldest``: the last rollback undid what lies between its
        target and itself; before its target, the rollbacks in force then
        count, and so on back (a rolled-back rollback is inside a range)."""
        rollbacks: list[tuple[int, int]] = []  # (seq, rollback_to), newest first
        try:
            before = await self._core.ledger_size()
        except CoreCallFailed as exc:  # the history still shows, unmarked
            log.warning("gateway: cannot read the ledger's rollbacks: %s", exc)
            return []
        for _ in range(UNDONE_PAGES):
            try:
                page = await self._core.entries(before, MAX_PAGE_ENTRIES)
            except CoreCallFailed as exc:
                log.warning("gateway: cannot read the ledger's rollbacks: %s", exc)
                break
            rollbacks += [
                (e.seq, e.rollback_to) for e in page.entries if e.form == kpb.EFFECT_FORM_ROLLBACK
            ]
            if not page.more or page.next_before_seq <= oldest:
                break
            before = page.next_before_seq
        return undone_ranges(rollbacks, oldest)

    async def _in_words(self, pv: cpb.RollbackPreview) -> dict[str, Any]:
        """The undone effects in words (the dry run's "what will be restored,
        what cannot be"), newest first, at most the last PREVIEW_ENTRIES."""
        try:
            history = await self._core.entries(pv.through_seq + 1, PREVIEW_ENTRIES)
        except CoreCallFailed as exc:  # the preview still shows, without words
            log.warning("gateway: cannot describe the undo: %s", exc)
            return {"restored": [], "cannot_undo": [], "kept": []}
        cannot, kept = set(pv.irreversible_seqs), set(pv.kept_seqs)
        undone = [e for e in history.entries if e.seq > pv.to_seq and e.kind == "kernel.effect"]
        return {
            "restored": [
                {"seq": e.seq, "text": e.description}
                for e in undone
                if e.seq not in cannot and e.seq not in kept
            ],
            "cannot_undo": [
                {"seq": e.seq, "text": e.description} for e in undone if e.seq in cannot
            ],
            "kept": [{"seq": e.seq, "text": e.description} for e in undone if e.seq in kept],
        }

    async def _m_approval_decide(self, params: p.ApprovalParams) -> dict[str, Any]:
        # The card is the owner's: only an owner peer sees it or answers it.
        if self.peer.level is not TrustLevel.OWNER:
            raise FrameInvalid(f"peer {self.peer.id} may not answer approvals", p.FORBIDDEN)
        seq = await self._core.decide_approval(params.id, params.allow)
        return {"id": params.id, "allowed": params.allow, "seq": seq}

    async def _m_rollback_preview(self, params: p.RollbackParams) -> dict[str, Any]:
        return await self._rollback(params, dry_run=True)

    async def _m_rollback(self, params: p.RollbackParams) -> dict[str, Any]:
        return await self._rollback(params, dry_run=False)

    async def _m_ping(self, _params: p.NoParams) -> dict[str, Any]:
        return {"pong": True}

    def _admin(self, what: str) -> str:
        """The owner's console session, for a change only the owner makes."""
        if self.peer.level is not TrustLevel.OWNER or not self._owner_session:
            raise FrameInvalid(f"peer {self.peer.id} may not {what}", p.FORBIDDEN)
        return self._owner_session

    async def _m_session_rename(self, params: p.RenameParams) -> dict[str, Any]:
        return await _admin.rename(self._core, self._admin("rename sessions"), params)

    async def _m_session_archive(self, params: p.ArchiveParams) -> dict[str, Any]:
        return await _admin.archive(self._core, self._admin("archive sessions"), params)

    async def _m_log(self, params: p.LogParams) -> dict[str, Any]:
        return await _admin.log(self._core, self._admin("read the core's log"), params)

    async def _m_setting_set(self, params: p.SettingParams) -> dict[str, Any]:
        return await _admin.set_setting(self._core, self._admin("change settings"), params)

    async def _m_plugin_enable(self, params: p.PluginParams) -> dict[str, Any]:
        cred = self._admin("enable or disable plugins")
        return await _admin.set_plugin(self._core, cred, params)

    async def _m_providers(self, params: p.NoParams) -> dict[str, Any]:
        return await _admin.providers(self._core, self._admin("read the providers"), params)

    async def _m_provider_default(self, params: p.ProviderParams) -> dict[str, Any]:
        cred = self._admin("choose the model provider")
        return await _admin.set_provider(self._core, cred, params)

    async def _m_wechat_bind(self, params: p.WechatBindParams) -> dict[str, Any]:
        return await _admin.wechat_bind(self._core, self._admin("bind WeChat"), params)

    async def _m_plugin_preview(self, params: p.PreviewParams) -> dict[str, Any]:
        cred = self._admin("install plugins")
        return await _admin.preview_install(self._core, cred, params)

    async def _m_plugin_install(self, params: p.InstallParams) -> dict[str, Any]:
        return await _admin.install(self._core, self._admin("install plugins"), params)

    async def _m_wechat_list(self, params: p.NoParams) -> dict[str, Any]:
        cred = self._admin("read the WeChat bindings")
        return await _admin.wechat_list(self._core, cred, params)

    async def _m_trust_set(self, params: p.TrustParams) -> dict[str, Any]:
        return await _admin.set_trust(self._core, self._admin("change trust"), params)

    async def _m_skills(self, params: p.SkillListParams) -> dict[str, Any]:
        return await _skills.list_skills(self._core, self._admin("read the skills"), params)

    async def _m_skill_show(self, params: p.SkillParams) -> dict[str, Any]:
        return await _skills.show_skill(self._core, self._admin("read the skills"), params)

    async def _m_skill_log(self, params: p.SkillParams) -> dict[str, Any]:
        return await _skills.skill_log(self._core, self._admin("read the skills"), params)

    async def _m_memory(self, params: p.MemoryListParams) -> dict[str, Any]:
        return await _admin.memory(self._core, self._admin("read memory"), params)

    async def _m_memory_delete(self, params: p.MemoryDeleteParams) -> dict[str, Any]:
        return await _admin.delete_memory(self._core, self._admin("delete memory"), params)

    HANDLERS: ClassVar[dict[str, Handler]] = {
        "connect": _m_connect,
        "send": _m_send,
        "abort": _m_abort,
        "sessions": _m_sessions,
        "history": _m_history,
        "tools": _m_tools,
        "rollback.preview": _m_rollback_preview,
        "rollback": _m_rollback,
        "ping": _m_ping,
        "approval.decide": _m_approval_decide,
        "settings": _m_settings,
        "plugins": _m_plugins,
        "trust": _m_trust,
        "ledger": _m_ledger,
        "session.rename": _m_session_rename,
        "session.archive": _m_session_archive,
        "log": _m_log,
        "setting.set": _m_setting_set,
        "plugin.enable": _m_plugin_enable,
        "providers": _m_providers,
        "provider.default": _m_provider_default,
        "wechat.bind": _m_wechat_bind,
        "wechat.list": _m_wechat_list,
        "plugin.preview": _m_plugin_preview,
        "plugin.install": _m_plugin_install,
        "trust.set": _m_trust_set,
        "skills": _m_skills,
        "skill.show": _m_skill_show,
        "skill.log": _m_skill_log,
        "memory": _m_memory,
        "memory.delete": _m_memory_delete,
    }


#: Ledger entries the undo preview describes in words.
PREVIEW_ENTRIES = 200
#: Pages of ledger entries read back for the rollbacks that undid history.
UNDONE_PAGES = 5


def _preview(pv: cpb.RollbackPreview) -> dict[str, Any]:
    def show(c: cpb.StateChange, after: bool) -> Any:
        if not c.HasField("after" if after else "before"):
            return None
        value = from_value(c.after if after else c.before)
        return value.hex() if isinstance(value, bytes) else value

    return {
        "to_seq": pv.to_seq,
        "through_seq": pv.through_seq,
        "effects": pv.effects,
        "changes": [
            {
                "family": c.family,
                "key": c.key,
                "before": show(c, after=False),
                "after": show(c, after=True),
            }
            for c in pv.changes
        ],
        "irreversible": list(pv.irreversible_seqs),
        "kept_seqs": list(pv.kept_seqs),
    }


assert set(Methods.HANDLERS) == set(p.METHODS), "every protocol method has a handler"

__all__ = ["Handler", "Methods"]
