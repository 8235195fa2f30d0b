"""One WebSocket client: frames in and out over a trio stream, the connect
handshake, the request methods, and the event pump.

A misbehaving client costs only its own connection: a bad frame gets an
error frame naming the problem, a protocol violation or a flood closes the
connection with a close code that says why, and nothing here can raise into
the server's other connections.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import attrs
import trio

from naga.constants import MAX_PAGE_ENTRIES
from naga.trust import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import turn_pb2 as tpb
from naga.values import from_value
from naga_gateway import _admin, _pages, _skills
from naga_gateway import _protocol as p
from naga_gateway import _ws as ws
from naga_gateway._core import CorePort
from naga_gateway._hub import Hub, Peer, Stream
from naga_gateway._lanes import Inbound, Lanes, Ticket
from naga_gateway.errors import CoreCallFailed, FrameInvalid, LaneRefused, WebSocketError

log = logging.getLogger("naga.gateway")


@attrs.frozen
class Limits:
    """Per-connection limits (docs/protocol/websocket.md, "Limits")."""

    #: A message of MAX_MESSAGE_BYTES of text, JSON-escaped, fits.
    max_message: int = 8 * 1024 * 1024
    #: Requests per second a client may sustain, and its burst.
    rate: float = 50.0
    burst: int = 100
    #: Requests refused for the rate before the connection is closed.
    flood_strikes: int = 50
    #: Requests one client may have in flight at once.
    max_inflight: int = 64
    #: Seconds a new connection has to send ``connect``.
    connect_timeout: float = 10.0


class WebSocket:
    """A server-side WebSocket over an upgraded trio stream."""

    def __init__(self, stream: trio.abc.Stream, leftover: bytes, max_message: int) -> None:
        self._stream = stream
        self._reader = ws.FrameReader(max_message)
        self._pending: list[ws.Event] = []
        self._leftover = leftover
        self._send_lock = trio.Lock()
        self.closed = False

    async def receive(self) -> bytes | None:
        """The next data message; None once the peer closed. Pings are
        answered here."""
        while True:
            while self._pending:
                event = self._pending.pop(0)
                if isinstance(event, ws.Message):
                    return event.data
                if isinstance(event, ws.Ping):
                    await self._send_raw(ws.encode_frame(ws.OP_PONG, event.data))
                elif isinstance(event, ws.Close):
                    code = ws.CLOSE_NORMAL if event.code == 1005 else event.code
                    await self.close(code, "")
                    return None
            try:
                data = self._leftover or await self._stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""  # reset by the peer, or closed by our own close()
            self._leftover = b""
            if not data:
                self.closed = True
                return None
            self._pending.extend(self._reader.feed(bytes(data)))

    async def send_text(self, data: bytes) -> None:
        await self._send_raw(ws.encode_frame(ws.OP_TEXT, data))

    async def send_texts(self, messages: list[bytes]) -> None:
        """Several text messages in one write (a stream's backlog: with many
        owner tabs every event goes to each, and a write per event was the
        gateway's cost)."""
        await self._send_raw(b"".join(ws.encode_frame(ws.OP_TEXT, m) for m in messages))

    async def _send_raw(self, frame: bytes) -> None:
        if self.closed:
            return
        async with self._send_lock:
            try:
                await self._stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed = True

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        await self._send_raw(ws.encode_close(code, reason))
        self.closed = True
        await self._stream.aclose()


Handler = Callable[[Any, Any], Awaitable[dict[str, Any]]]


class Session:
    """The protocol over one WebSocket."""

    def __init__(
        self,
        sock: WebSocket,
        *,
        core: CorePort,
        lanes: Lanes,
        hub: Hub,
        limits: Limits,
        owner: bool,
        owner_session: str = "",
    ) -> None:
        """``owner``: the upgrade carried the owner's proof (the session
        cookie); without it the peer is at most a guest. ``owner_session``:
        that cookie's value, passed with each owner change for the core to
        check again (naga_gateway._admin)."""
        self._ws = sock
        self._core = core
        self._lanes = lanes
        self._hub = hub
        self._limits = limits
        self._owner = owner
        self._owner_session = owner_session if owner else ""
        self._peer: Peer | None = None
        self._stream: Stream | None = None
        self._tokens = float(limits.burst)
        self._stamp = trio.current_time()
        self._strikes = 0
        self._inflight = 0

    async def _receive(self) -> bytes | None:
        """The next message; None once closed, by the peer or by us for a
        protocol violation (closed with the code that names it)."""
        try:
            return await self._ws.receive()
        except WebSocketError as exc:
            await self._ws.close(exc.close_code, str(exc))
            return None

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            if not await self._handshake(nursery):
                nursery.cancel_scope.cancel()
                return
            while (raw := await self._receive()) is not None:
                if not self._admit():
                    if self._strikes >= self._limits.flood_strikes:
                        await self._ws.close(ws.CLOSE_POLICY, "too many requests")
                        break
                    await self._ws.send_text(
                        p.error(_id_of(raw), p.RATE_LIMITED, "too many requests; slow down")
                    )
                    continue
                await self._dispatch(raw, nursery)
            nursery.cancel_scope.cancel()

    def _admit(self) -> bool:
        now = trio.current_time()
        lim = self._limits
        self._tokens = min(lim.burst, self._tokens + (now - self._stamp) * lim.rate)
        self._stamp = now
        if self._tokens < 1:
            self._strikes += 1
            return False
        self._tokens -= 1
        return True

    async def _handshake(self, nursery: trio.Nursery) -> bool:
        """Wait for ``connect``; False when the connection ended instead."""
        with trio.move_on_after(self._limits.connect_timeout):
            while (raw := await self._receive()) is not None:
                try:
                    req, params = p.parse_request(raw)
                except FrameInvalid as exc:
                    await self._ws.send_text(p.error(exc.request_id, exc.code, str(exc)))
                    continue
                if not isinstance(params, p.ConnectParams):
                    msg = "the first request must be 'connect'"
                    await self._ws.send_text(p.error(req.id, p.NOT_CONNECTED, msg))
                    continue
                if params.protocol != p.PROTOCOL_VERSION:
                    await self._ws.send_text(
                        p.error(
                            req.id,
                            p.UNSUPPORTED_VERSION,
                            f"protocol {params.protocol} is not spoken; "
                            f"this gateway speaks {p.PROTOCOL_VERSION}",
                        )
                    )
                    await self._ws.close(ws.CLOSE_POLICY, "unsupported protocol version")
                    return False
                await self._connect(req.id, params, nursery)
                return True
            return False
        await self._ws.close(ws.CLOSE_POLICY, "no connect request in time")
        return False

    async def _connect(self, rid: str, params: p.ConnectParams, nursery: trio.Nursery) -> None:
        peer = await self._derive_peer(params)
        resume = None if params.resume is None else (params.resume.stream, params.resume.after)
        stream, resumed = self._hub.open(peer, resume)
        self._peer, self._stream = peer, stream
        cursor = resume[1] if resume is not None and resumed else stream.last_seq
        pol = peer.policy
        result = {
            "protocol": p.PROTOCOL_VERSION,
            "peer": peer.id,
            "trust": peer.level.label,
            "stream": stream.id,
            "last_seq": stream.last_seq,
            "resumed": resumed,
            "session_prefix": "" if peer.level is TrustLevel.OWNER else peer.session_prefix,
            "policy": {
                "turn_budget": pol.turn_budget,
                "max_tool_risk": pol.max_tool_risk,
                "events": sorted(k.value for k in pol.events),
                "may_rollback": pol.may_rollback,
            },
        }
        await self._ws.send_text(p.response(rid, result))
        nursery.start_soon(self._pump, stream, cursor)

    async def _derive_peer(self, params: p.ConnectParams) -> Peer:
        if self._owner:
            return Peer("webchat:owner", TrustLevel.OWNER)
        peer_id = f"webchat:{params.name or 'anon-' + secrets.token_hex(4)}"
        try:
            level = await self._core.trust(peer_id)
        except CoreCallFailed:
            level = TrustLevel.UNTRUSTED
        # A peer without the owner's proof proves no identity, so a claimed
        # name reaches at most guest, whatever the trust table says of it.
        return Peer(peer_id, min(level, TrustLevel.GUEST))

    async def _pump(self, stream: Stream, cursor: int) -> None:
        while not self._ws.closed:
            await stream.wait_after(cursor)
            frames = stream.since(cursor)
            if frames is None:
                # This client fell more than a buffer behind: it must reload.
                await self._ws.close(ws.CLOSE_POLICY, "too slow; reconnect and reload")
                return
            if frames:
                await self._ws.send_texts([frame for _, frame in frames])
                cursor = frames[-1][0]

    async def _dispatch(self, raw: bytes, nursery: trio.Nursery) -> None:
        """Parse a frame and start its request. A ``send`` takes its place
        in its lane here, before any other frame is read, so a session's
        messages keep the order they arrived in."""
        try:
            req, params = p.parse_request(raw)
        except FrameInvalid as exc:
            await self._ws.send_text(p.error(exc.request_id, exc.code, str(exc)))
            return
        if self._inflight >= self._limits.max_inflight:
            await self._ws.send_text(p.error(req.id, p.BUSY, "too many requests in flight"))
            return
        ticket = None
        if isinstance(params, p.SendParams):
            inbound = Inbound(
                params.session, params.text, params.key, self.peer.id, params.mode, self.peer.level
            )
            try:
                self._check_session(params.session)
                ticket = self._lanes.enqueue(inbound)
            except FrameInvalid as exc:
                await self._ws.send_text(p.error(req.id, exc.code, str(exc)))
                return
            except LaneRefused as exc:
                await self._ws.send_text(p.error(req.id, p.BUSY, str(exc)))
                return
        self._inflight += 1
        nursery.start_soon(self._request, req, params, ticket)

    async def _request(self, req: p.Request, params: Any, ticket: Ticket | None) -> None:
        try:
            if ticket is not None:
                result = await self._acked(ticket)
            else:
                result = await self.HANDLERS[req.method](self, params)
            await self._ws.send_text(p.response(req.id, result))
        except FrameInvalid as exc:
            await self._ws.send_text(p.error(req.id, exc.code, str(exc)))
        except CoreCallFailed as exc:
            await self._ws.send_text(p.error(req.id, p.CORE, f"{exc} ({exc.code})"))
        except LaneRefused as exc:
            await self._ws.send_text(p.error(req.id, p.BUSY, str(exc)))
        finally:
            self._inflight -= 1

    @property
    def peer(self) -> Peer:
        assert self._peer is not None
        return self._peer

    def _check_session(self, session: str) -> None:
        if not self.peer.may_use(session):
            raise FrameInvalid(
                f"peer {self.peer.id} may only use sessions named {self.peer.session_prefix}*",
                p.FORBIDDEN,
            )

    # --- methods -----------------------------------------------------------------

    async def _m_connect(self, _params: Any) -> dict[str, Any]:
        raise FrameInvalid("already connected", p.INVALID_PARAMS)

    async def _m_send(self, params: p.SendParams) -> dict[str, Any]:
        self._check_session(params.session)
        inbound = Inbound(
            params.session, params.text, params.key, self.peer.id, params.mode, self.peer.level
        )
        return await self._acked(self._lanes.enqueue(inbound))

    async def _acked(self, ticket: Ticket) -> dict[str, Any]:
        ack = await self._lanes.wait(ticket)
        return {
            "message_seq": ack.message_seq,
            "turn": ack.turn_id,
            "steered": ack.steered,
            "replayed": ack.replayed,
        }

    async def _m_abort(self, params: p.SessionParams) -> dict[str, Any]:
        self._check_session(params.session)
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
        self._check_session(params.session)
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
        dead: list[tuple[int, int]] = []
        cursor: int | None = None  # everything at or before it is as it was then
        for seq, target in rollbacks:
            if cursor is None or seq < cursor:  # in force (not itself undone)
                dead.append((target, seq))
                cursor = target
                if cursor < oldest:
                    break
        return dead

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


def _id_of(raw: bytes) -> str | None:
    """The request id of a frame refused unread, when it has one, so the
    client knows which request to retry."""
    try:
        return p.parse_request(raw)[0].id
    except FrameInvalid as exc:
        return exc.request_id


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


assert set(Session.HANDLERS) == set(p.METHODS), "every protocol method has a handler"

__all__ = ["Limits", "Session", "WebSocket"]
