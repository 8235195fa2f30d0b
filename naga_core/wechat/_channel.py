"""The WeChat channel: bindings, their long polls, inbound messages into
turns, replies out (docs/design/wechat.md).

What is where. Secrets (bot token, base URL, context tokens) are in
``$NAGA_HOME/credentials/wechat`` (``_store``). The ledger has each
binding's state (``wechat.binding/<bot>``, no secret), each binding's
cursor (``wechat.cursor/<bot>``) and every inbound message not yet fully
answered (``wechat.pending/<key>``: user, session, text, parts sent).

Exactly once. A batch's new messages are registered as pending and the
cursor that covers them after them, in one write made durable before
anything else happens (a torn tail keeps a prefix: never the cursor
without its messages). A redelivered message is dropped: its key is
pending, or known to its session (the turn's idempotency key, rebuilt from
the ledger at start), or seen within 24 h. Each pending message runs its
turn under its key (a repeat of the key replays the recorded turn, never a
second one) and sends its reply parts; each part sent is an irreversible
ledger effect that also counts the part in the pending record, and every
part's client_id is derived from the key, so a part resent after a crash
is the same message to the server. After a restart every pending record is
resumed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import trio
from google.protobuf.message import DecodeError

import sandbox
from naga.v1 import core_pb2 as cpb
from naga.v1 import job_pb2 as jpb
from naga.v1 import turn_pb2 as tpb
from naga.v1 import wechat_media_pb2 as wmpb
from naga.v1 import wechat_pb2 as wpb
from naga_core._home import Home
from naga_core._store import blob_store
from naga_core.agent import Agent, AgentError, Core, Reloading, SessionNotFound, TurnCursor
from naga_core.egress import EgressPolicy, EgressProxies
from naga_core.errors import NagaError, NotFound
from naga_core.plugins import Worker
from naga_core.supervisor import WorkerTuning
from naga_core.wechat import _keys
from naga_core.wechat._chunks import chunks
from naga_core.wechat._media import read_media_file, remove_outbox_file, write_outbox_file
from naga_core.wechat._plugin import PluginCallFailed, WechatPlugin, write_manifest
from naga_core.wechat._sealed import loaded, stored, subject_of_user
from naga_core.wechat._store import Credentials, CredentialsInvalid, WechatError

log = logging.getLogger("naga.wechat")
T = TypeVar("T")
TurnStream = TurnCursor | Reloading

BINDING = "wechat.binding"
CURSOR = "wechat.cursor"
PENDING = "wechat.pending"
F = wpb.WechatFailure
_ACTIVE = wpb.WECHAT_BINDING_STATUS_ACTIVE
_PAUSED = wpb.WECHAT_BINDING_STATUS_PAUSED


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    #: The client's long-poll timeout (the server's hint counts, up to this).
    poll_timeout_ms: int = 25_000
    #: Between reply parts (the protocol doc: about 1 s).
    chunk_pause_s: float = 1.0
    typing_every_s: float = 5.0
    #: The indicator starts only once a turn has run this long: a reply
    #: faster than that needs none (two iLink calls less on its path).
    typing_after_s: float = 0.5
    #: T's error loop: 2 s after a failure, 30 s after 3 in a row.
    retry_s: float = 2.0
    long_retry_s: float = 30.0
    #: A -2 on a send: retried (same client_id) this often, this far apart (H).
    send_attempts: int = 4
    send_retry_s: float = 3.0
    dedupe_s: float = 24 * 3600.0
    #: Replies per inbound message the server accepts (the 10-replies rule).
    max_replies: int = 10
    #: A QR login gives up after this many expired codes.
    max_codes: int = 3


@dataclass(frozen=True, slots=True)
class _ChannelCaller:
    """The channel starts turns with the core's authority; each turn's
    trust is the peer's (the binding's owner: owner; anyone else: the trust
    table's level, untrusted unless the owner raised it)."""

    owner: bool = True
    grant: None = None


@dataclass
class _Typing:
    """One user's typing indicator: how many of their turns are unanswered,
    the keep-alive's scope, and whether it said 'typing' yet."""

    count: int = 0
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    shown: bool = False


@dataclass
class _Order:
    """Where one message stands among its user's: the previous turn's
    acceptance and reply it waits for, its own it sets."""

    prev_accepted: trio.Event | None
    accepted: trio.Event
    prev_replied: trio.Event | None
    replied: trio.Event


@dataclass
class _Live:
    cred: wpb.WechatCredential
    state: wpb.WechatBinding
    cursor: str = ""
    timeout_ms: int = 0
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    #: Each user's last reply, set when it has gone: the next waits for it
    #: (the turns queue in the core's lanes; the replies go out in order).
    replied: dict[str, trio.Event] = field(default_factory=dict[str, trio.Event])
    #: Each user's last turn, set once the core accepted (recorded) it: the
    #: next is started only then, so the core records them in arrival order
    #: (as the gateway does, ADR 0028).
    accepted: dict[str, trio.Event] = field(default_factory=dict[str, trio.Event])
    #: Each user's unanswered turns, and the typing indicator kept alive
    #: while there is one.
    typing: dict[str, _Typing] = field(default_factory=dict[str, _Typing])
    seen: dict[str, float] = field(default_factory=dict[str, float])
    polling: bool = False

    @property
    def bot_id(self) -> str:
        return self.cred.bot_id


@dataclass
class _Login:
    qrcode: str
    url: str
    api_base: str
    codes: int = 1


async def journaled(core: Core, fn: Callable[[], T]) -> T:
    """A kernel write made durable (on a thread), subscribers woken."""
    result = core.write(fn)
    if await trio.to_thread.run_sync(core.settle):
        core.notify_appended()
    return result


_FETCHED = frozenset({2, 4, 5})
_KIND_NAMES = {2: "an image", 4: "a file", 5: "a video"}


def _host_port(url: str) -> tuple[str, int] | None:
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


class WechatChannel:
    """``await nursery.start(channel.serve)``; its RPCs through ``_service``."""

    def __init__(
        self,
        core: Core,
        home_root: str,
        agent: Agent,
        proxies: EgressProxies,
        *,
        tuning: WorkerTuning,
        report: sandbox.KernelReport,
        config: ChannelConfig | None = None,
    ) -> None:
        self._core = core
        self._home_root = home_root
        self._agent = agent
        self._proxies = proxies
        self._tuning = tuning
        self._report = report
        self.config = config or ChannelConfig()
        self._creds = Credentials(home_root)
        self.live: dict[str, _Live] = {}
        self._pending: dict[str, wpb.WechatPending] = {}
        self._logins: dict[str, _Login] = {}
        self._plugin: WechatPlugin | None = None
        self._plugin_started = False
        #: Why the channel does not run, if it does not.
        self.problem = ""
        self._nursery: trio.Nursery | None = None
        self.changed = trio.Event()

    def _text(self, name: str) -> str:
        return self._core.settings.get_text(name)

    @property
    def home(self) -> Home:
        return self._core.home

    # --- start ------------------------------------------------------------------

    def _destinations(self) -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        urls = [self._text("wechat.api_base"), self._text("wechat.cdn_base")]
        urls += [live.cred.base_url for live in self.live.values()]
        urls += [login.api_base for login in self._logins.values()]
        for url in urls:
            hp = _host_port(url)
            if hp is not None and hp not in found:
                found.append(hp)
        return found

    def _policy(self) -> EgressPolicy:
        loopback = self._text("egress.loopback_hosts").split(",")
        return EgressPolicy.of("wechat", self._destinations(), loopback_hosts=loopback)

    async def serve(self, *, task_status: trio.TaskStatus[WechatChannel]) -> None:
        try:
            path = await self._proxies.open("wechat", self._policy)
            installed = write_manifest(self._home_root, self._destinations())
        except (NagaError, OSError, ValueError) as exc:
            # The channel is off; the core serves on (and says why).
            self.problem = f"the WeChat channel cannot start: {exc}"
            log.error("%s", self.problem)  # noqa: TRY400 - the cause is in the line
            task_status.started(self)
            return
        self._plugin = WechatPlugin(
            self._home_root,
            installed,
            tuning=self._tuning,
            report=self._report,
            egress_socket=path,
            note=self._note,
            give_up=self._gave_up,
        )
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._load()
            task_status.started(self)
            await trio.sleep_forever()

    def _load(self) -> None:
        state = self._core.kernel.state
        for bot_id, raw in state.family(BINDING).items():
            try:
                binding = wpb.WechatBinding.FromString(bytes(raw))  # type: ignore[arg-type]
                cred = self._creds.load(bot_id)
            except (DecodeError, TypeError, CredentialsInvalid) as exc:
                log.warning("wechat: binding %s cannot be loaded: %s", bot_id, exc)
                continue
            if cred is None:
                binding.status = _PAUSED
                binding.detail = "its credential file is missing: bind again"
                cred = wpb.WechatCredential(bot_id=bot_id, owner_user_id=binding.owner_user_id)
            cursor = state.get((CURSOR, bot_id))
            live = _Live(cred, binding, cursor=cursor if isinstance(cursor, str) else "")
            self.live[bot_id] = live
        for key, raw in state.family(PENDING).items():
            try:
                pending = loaded(self._agent.memory.sealer, bytes(raw))  # type: ignore[arg-type]
            except (DecodeError, TypeError):
                log.warning("wechat: pending message %s does not decode; dropped", key)
                continue
            self._pending[key] = pending
        for live in self.live.values():
            if live.state.status == _ACTIVE:
                self._start(live)
        for pending in list(self._pending.values()):
            live = self.live.get(pending.bot_id)
            if live is not None:
                self._enqueue(live, pending)

    def _start(self, live: _Live) -> None:
        assert self._nursery is not None
        live.scope = trio.CancelScope()
        self._nursery.start_soon(self._run_binding, live)

    async def _run_binding(self, live: _Live) -> None:
        with live.scope:
            try:
                await self._poll_loop(live)
            finally:
                live.polling = False
                self._wake()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def _account(self, live: _Live) -> wpb.WechatAccount:
        return wpb.WechatAccount(
            bot_id=live.bot_id,
            token=live.cred.token,
            base_url=live.cred.base_url,
            cdn_base=self._text("wechat.cdn_base"),
        )

    @property
    def worker(self) -> Worker | None:
        """The plugin's worker, once started."""
        return self._plugin.worker if self._plugin is not None and self._plugin_started else None

    @property
    def plugin(self) -> WechatPlugin:
        """The worker, started at the first need (a core without bindings
        runs no WeChat process)."""
        if self._plugin is None:
            raise PluginCallFailed(self.problem or "the WeChat channel is not running")
        if not self._plugin_started and self._nursery is not None:
            self._plugin_started = True
            self._nursery.start_soon(self._plugin.run)
        return self._plugin

    # --- the ledger -----------------------------------------------------------------

    async def _note(self, text: str) -> None:
        log.warning("%s", text)
        try:
            await journaled(
                self._core, lambda: self._core.kernel.perform([], None, description=text)
            )
        except NagaError:
            log.exception("cannot journal %r", text)

    async def _gave_up(self, worker: Worker, reason: str) -> None:
        await self._note(f"wechat: the plugin failed for good: {reason}")

    async def _save_state(self, live: _Live, description: str) -> None:
        stored = wpb.WechatBinding()
        stored.CopyFrom(live.state)
        for name in ("received", "sent", "last_error", "polling"):
            stored.ClearField(name)
        value = stored.SerializeToString()
        await journaled(
            self._core,
            lambda: self._core.kernel.register(
                BINDING, live.bot_id, value, description=description
            ),
        )
        self._wake()

    # --- receiving --------------------------------------------------------------------

    async def _poll_loop(self, live: _Live) -> None:
        failures = 0
        notified = await self._notify(live, "start")
        live.polling = True
        self._wake()
        try:
            while True:
                timeout = min(
                    live.timeout_ms or self.config.poll_timeout_ms, self.config.poll_timeout_ms
                )
                req = wpb.WechatPollRequest(
                    account=self._account(live), cursor=live.cursor, timeout_ms=timeout
                )
                try:
                    result = await self.plugin.poll(req)
                except PluginCallFailed as exc:
                    result = wpb.WechatPollResult(failure=F.WECHAT_FAILURE_NETWORK, detail=str(exc))
                if result.failure == F.WECHAT_FAILURE_STALE:
                    await self._pause(live, f"getupdates: {result.detail or 'session timeout'}")
                    return
                if result.failure:
                    failures += 1
                    live.state.last_error = f"getupdates: {result.detail}"
                    if failures == 1:
                        await self._note(
                            f"wechat: bot {live.bot_id}: receiving failed ({result.detail}); "
                            "retrying"
                        )
                    await trio.sleep(
                        self.config.long_retry_s if failures % 3 == 0 else self.config.retry_s
                    )
                    continue
                failures = 0
                if result.next_timeout_ms:
                    live.timeout_ms = result.next_timeout_ms
                for line in result.skipped:
                    await self._note(f"wechat: bot {live.bot_id}: a message was skipped: {line}")
                await self._take(live, result)
        finally:
            if notified:
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    await self._notify(live, "stop")

    async def _notify(self, live: _Live, which: str) -> bool:
        try:
            await self.plugin.notify(self._account(live), which)
        except PluginCallFailed:
            return False  # T ignores these failures too
        return True

    async def _known(self, live: _Live, key: str, session: str) -> bool:
        now = time.monotonic()
        seen = live.seen.get(key)
        if seen is not None and now - seen < self.config.dedupe_s:
            return True
        if key in self._pending:
            return True
        try:
            found = await self._agent.session(session)
        except (SessionNotFound, AgentError):
            return False
        return key in found.keys

    async def _take(self, live: _Live, result: wpb.WechatPollResult) -> None:
        fresh: list[wpb.WechatPending] = []
        tokens_changed = False
        for m in result.messages:
            if m.from_user_id == live.bot_id or m.message_type == 2:
                continue  # the bot's own message
            user = m.from_user_id
            if m.context_token and live.cred.context_tokens.get(user) != m.context_token:
                live.cred.context_tokens[user] = m.context_token
                tokens_changed = True
            session = _keys.session_of(live.bot_id, user)
            key = _keys.dedupe_key(live.bot_id, m)
            if key in (p.key for p in fresh) or await self._known(live, key, session):
                log.info("wechat: bot %s: message %s delivered again; dropped", live.bot_id, key)
                continue
            fresh.append(
                wpb.WechatPending(
                    bot_id=live.bot_id,
                    user_id=user,
                    session=session,
                    key=key,
                    text=await self._describe(live, m),
                    owner=user == live.cred.owner_user_id,
                )
            )
        if tokens_changed:
            # Before the messages count: a reply must find its user's token.
            await trio.to_thread.run_sync(partial(self._creds.save, live.cred, sync=False))
        cursor = result.cursor
        if not result.messages:
            if cursor:
                live.cursor = cursor  # nothing to cover: kept in memory only
            return
        kernel = self._core.kernel

        def record() -> None:
            for p in fresh:
                peer = _keys.peer_of(p.bot_id, p.user_id)
                kernel.register(
                    PENDING,
                    p.key,
                    stored(self._agent.memory.sealer, p),
                    description=f"wechat: message from {peer} recorded ({len(p.text)} characters)",
                )
            if cursor and cursor != live.cursor:
                # After the messages it covers, in the same durable write.
                kernel.register(
                    CURSOR, live.bot_id, cursor, description=f"wechat: bot {live.bot_id} cursor"
                )

        await journaled(self._core, record)
        if cursor:
            live.cursor = cursor
        now = time.monotonic()
        for p in fresh:
            live.seen[p.key] = now
            self._pending[p.key] = p
            live.state.received += 1
            self._enqueue(live, p)
        self._prune(live, now)

    async def _describe(self, live: _Live, m: wpb.WechatMessage) -> str:
        """The message as text; media fetched, checked, archived, described."""
        if not any(item.type in _FETCHED for item in m.items):
            return _keys.describe(m)
        lines: list[str] = []
        for item in m.items:
            if item.type not in _FETCHED:
                lines.append(_keys.describe(wpb.WechatMessage(items=[item])))
                continue
            lines.append(await self._fetch(live, m.from_user_id, item))
        return "\n".join(lines)

    async def _fetch(self, live: _Live, user: str, item: wpb.WechatItem) -> str:
        kind = _KIND_NAMES.get(item.type, "media")
        req = wpb.WechatMediaRequest(account=self._account(live), item=item)
        try:
            got = await self.plugin.media(req)
        except PluginCallFailed as exc:
            got = wpb.WechatMediaResult(failure=F.WECHAT_FAILURE_NETWORK, detail=str(exc))
        if got.failure:
            peer = _keys.peer_of(live.bot_id, user)
            await self._note(f"wechat: {kind} from {peer} refused: {got.detail}")
            return f"[{kind} that could not be used: {got.detail}]"
        work = os.path.join(self._home_root, "work", "plugins", "wechat")
        try:
            data = await trio.to_thread.run_sync(
                read_media_file, work, got.file, got.size, got.sha256
            )
            # Sealed under the sender's key, like their messages (adr 0037).
            who = subject_of_user(live.bot_id, user, owner=user == live.cred.owner_user_id)
            sealed = self._agent.memory.sealer.seal_blob(who, data)
            digest = await trio.to_thread.run_sync(blob_store(self._core.home).put, sealed)
        except (OSError, NagaError, ValueError) as exc:
            await self._note(f"wechat: {kind} could not be archived: {exc}")
            return f"[{kind} that could not be archived]"
        size = f"{got.mime}, {got.size} bytes"
        if got.width and got.height:
            size += f", {got.width}x{got.height}"
        name = f" {item.file_name!r}" if item.file_name else ""
        seen = (
            "; this model cannot see images, so it gets this description" if item.type == 2 else ""
        )
        return (
            f"[{kind}{name}: {size}, sha256 {hashlib.sha256(data).hexdigest()}, kept sealed in "
            f"the blob store as {digest.hex()}{seen}]"
        )

    def _prune(self, live: _Live, now: float) -> None:
        if len(live.seen) > 10_000:
            horizon = now - self.config.dedupe_s
            live.seen = {k: t for k, t in live.seen.items() if t >= horizon}

    def _enqueue(self, live: _Live, p: wpb.WechatPending) -> None:
        """The message's turn, started in the core once the user's previous
        one was accepted (recorded, then admitted by the core's lanes: one
        turn at a time per session, behind the global cap, like a WebChat
        message); its reply after the user's previous reply."""
        order = _Order(
            prev_accepted=live.accepted.get(p.user_id),
            accepted=trio.Event(),
            prev_replied=live.replied.get(p.user_id),
            replied=trio.Event(),
        )
        live.accepted[p.user_id] = order.accepted
        live.replied[p.user_id] = order.replied
        assert self._nursery is not None
        self._nursery.start_soon(self._answer, live, p, order)

    def _start_turn(self, p: wpb.WechatPending) -> TurnStream | tpb.TurnError:
        key = p.key if p.attempt == 0 else f"{p.key}/{p.attempt}"
        req = tpb.RunTurnRequest(
            session=p.session,
            text=p.text,
            idempotency_key=key,
            peer=_keys.peer_of(p.bot_id, p.user_id),
            trust=cpb.TRUST_LEVEL_OWNER if p.owner else cpb.TRUST_LEVEL_UNSPECIFIED,
            # Behind the session's running turn (the console's, or the
            # user's previous message), in the core's lane.
            mode=tpb.QUEUE_MODE_FOLLOWUP,
        )
        try:
            return self._agent.start(_ChannelCaller(), req)
        except NagaError as exc:
            return tpb.TurnError(message=str(exc))

    # --- answering ------------------------------------------------------------------

    async def _answer(self, live: _Live, p: wpb.WechatPending, order: _Order) -> None:
        try:
            if p.sent == 0:
                self._typing_up(live, p.user_id)
            try:
                if order.prev_accepted is not None:
                    await order.prev_accepted.wait()
                # A reply cut by a crash is rebuilt from the recorded turn (a replay).
                text = await self._turn(p, self._start_turn(p), order.accepted)
            finally:
                order.accepted.set()
                if p.sent == 0:
                    self._typing_down(live, p.user_id)
            if order.prev_replied is not None:
                await order.prev_replied.wait()
            if self.live.get(live.bot_id) is not live:
                return  # unbound since
            await self._reply(live, p, text)
        except NagaError as exc:
            await self._note(f"wechat: answering {p.key} failed: {exc}")
        finally:
            order.replied.set()

    def _typing_up(self, live: _Live, user: str) -> None:
        typing = live.typing.get(user)
        if typing is None:
            typing = live.typing[user] = _Typing()
            assert self._nursery is not None
            self._nursery.start_soon(self._typing, live, user, typing)
        typing.count += 1

    def _typing_down(self, live: _Live, user: str) -> None:
        """One turn of the user ended: with none left the indicator stops,
        as the reply's first part leaves (not before it: a round trip less
        between the turn's end and the reply)."""
        typing = live.typing.get(user)
        if typing is None:
            return
        typing.count -= 1
        if typing.count > 0:
            return
        live.typing.pop(user, None)
        typing.scope.cancel()
        if typing.shown:
            assert self._nursery is not None
            self._nursery.start_soon(self._stop_typing, live, user)

    async def _turn(
        self, p: wpb.WechatPending, started: TurnStream | tpb.TurnError, accepted: trio.Event
    ) -> str:
        """The turn's reply text (run, joined or replayed under the key)."""
        while True:
            if isinstance(started, tpb.TurnError):
                final, error = None, started
            else:
                final, error = await self._follow(started, accepted)
            if final is not None and final.reply_seq == 0 and p.sent == 0:
                # A turn the core lost to a crash (accepted, never ended): again.
                p.attempt += 1
                started = self._start_turn(p)
                continue
            if final is not None:
                return final.text
            assert error is not None
            return f"(Naga could not answer: {error.message or 'the turn failed'})"

    async def _follow(
        self, cursor: TurnStream, accepted: trio.Event
    ) -> tuple[tpb.TurnFinal | None, tpb.TurnError | None]:
        final: tpb.TurnFinal | None = None
        error: tpb.TurnError | None = None
        while True:
            batch = await cursor.next()
            if batch is None:
                break
            for event in batch:
                which = event.WhichOneof("kind")
                if which == "accepted":
                    accepted.set()
                elif which == "final":
                    final = event.final
                elif which == "error":
                    error = event.error
        if final is None and error is None:
            error = tpb.TurnError(message="the turn ended without an answer")
        return final, error

    async def _stop_typing(self, live: _Live, user: str) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await self._send_typing(live, user, 2)

    async def _typing(self, live: _Live, user: str, typing: _Typing) -> None:
        with typing.scope:
            await trio.sleep(self.config.typing_after_s)
            while True:
                typing.shown = True
                await self._send_typing(live, user, 1)
                await trio.sleep(self.config.typing_every_s)

    async def _send_typing(self, live: _Live, user: str, status: int) -> None:
        req = wpb.WechatTypingRequest(
            account=self._account(live),
            to_user_id=user,
            context_token=live.cred.context_tokens.get(user, ""),
            status=status,
        )
        try:
            await self.plugin.typing(req)
        except PluginCallFailed as exc:
            log.info("wechat: typing for %s failed: %s", user, exc)

    def _parts(self, text: str) -> tuple[list[str], int]:
        parts = chunks(text or "(no answer)")
        limit = self.config.max_replies
        if len(parts) <= limit:
            return parts, 0
        cut = len(parts) - (limit - 1)
        note = (
            f"(The reply continues in {cut} more part(s) that WeChat will not carry: it allows "
            f"{limit} messages per message you send. The whole reply is in the Naga console.)"
        )
        return [*parts[: limit - 1], note], cut

    async def _reply(self, live: _Live, p: wpb.WechatPending, text: str) -> None:
        parts, cut = self._parts(text)
        peer = _keys.peer_of(p.bot_id, p.user_id)
        if cut and p.sent == 0:
            await self._note(
                f"wechat: the reply to {peer} has {cut + len(parts) - 1} parts; WeChat carries "
                f"{len(parts)} per inbound message (the 10-replies rule): the last is a note, "
                f"{cut} part(s) stay in the session only"
            )
        kernel = self._core.kernel
        answered = False
        try:
            for index in range(p.sent, len(parts)):
                if index > p.sent:
                    await trio.sleep(self.config.chunk_pause_s)
                client_id = _keys.client_id(p.key, index)
                failure = await self._send_part(live, p, parts[index], client_id)
                if failure:
                    await self._note(
                        f"wechat: part {index + 1}/{len(parts)} of the reply to {peer} was not "
                        f"delivered: {failure}"
                    )
                    live.state.last_error = f"sendmessage: {failure}"
                    return
                p.sent = index + 1
                last = p.sent == len(parts)
                value = None if last else stored(self._agent.memory.sealer, p)
                description = (
                    f"wechat: sent part {index + 1}/{len(parts)} of the reply to {peer} "
                    f"({len(parts[index])} characters, client_id {client_id})"
                )
                counted = f"wechat: {p.key} answered" if last else description + " (counted)"

                def sent(
                    value: bytes | None = value,
                    description: str = description,
                    counted: str = counted,
                ) -> None:
                    # The last part's effect and the message's end in one write.
                    kernel.perform([], None, description=description)
                    kernel.register(PENDING, p.key, value, description=counted)

                await journaled(self._core, sent)
                answered = last
                live.state.sent += 1
                self._wake()
        finally:
            self._pending.pop(p.key, None)
            if not answered:
                with trio.CancelScope(shield=True):
                    await journaled(
                        self._core,
                        lambda: kernel.register(
                            PENDING, p.key, None, description=f"wechat: {p.key} answered"
                        ),
                    )

    async def _send_part(self, live: _Live, p: wpb.WechatPending, text: str, client_id: str) -> str:
        """Send one part; "" when it went, else why not."""
        why = ""
        for attempt in range(self.config.send_attempts):
            if attempt:
                await trio.sleep(self.config.send_retry_s)
            req = wpb.WechatSendRequest(
                account=self._account(live),
                to_user_id=p.user_id,
                context_token=live.cred.context_tokens.get(p.user_id, ""),
                client_id=client_id,
                text=text,
            )
            try:
                result = await self.plugin.send(req)
            except PluginCallFailed as exc:
                why = str(exc)
                continue
            if not result.failure:
                return ""
            if result.failure == F.WECHAT_FAILURE_STALE:
                await self._pause(live, f"sendmessage: {result.detail}")
                return "the binding's token is stale (-14); scan a new QR code"
            why = result.detail
            if result.failure == F.WECHAT_FAILURE_REFUSED and result.code == -2:
                why = (
                    "WeChat refused it (-2): outside the reply window (the user's last message "
                    "is more than 24 h old) or past the 10 replies allowed per message; the user "
                    "must write again"
                )
                continue
            if result.failure != F.WECHAT_FAILURE_NETWORK:
                return why
        return why

    async def deliver_job(self, job: jpb.Job, fire: jpb.JobFire, text: str) -> None:
        """A scheduled run's reply to the job's WeChat user, proactively: it
        goes with the user's latest context token, which WeChat honours only
        within its reply window (and 10 messages per inbound one). What
        cannot go is a ledger note naming the job and its session, never a
        silent loss; each part sent is an irreversible effect."""
        bot, _, user = job.deliver_to.removeprefix("wechat:").partition("/")
        where = f"the reply of job {job.id} (session {job.session}) to {job.deliver_to}"
        live = self.live.get(bot)
        why = ""
        if live is None:
            why = f"there is no binding {bot!r} any more"
        elif live.state.status != _ACTIVE:
            why = f"the binding is paused ({live.state.detail})"
        elif not live.cred.context_tokens.get(user):
            why = (
                "this user has never written to the bot, and WeChat carries a message only "
                "in reply to one of theirs"
            )
        if live is None or why:
            await self._note(f"wechat: {where} was not delivered: {why}; it stays in the session")
            return
        parts, _ = self._parts(text)
        p = wpb.WechatPending(bot_id=bot, user_id=user, session=job.session, key=fire.key)
        for index, part in enumerate(parts):
            if index:
                await trio.sleep(self.config.chunk_pause_s)
            client_id = _keys.client_id(f"job:{fire.key}", index)
            failure = await self._send_part(live, p, part, client_id)
            if failure:
                live.state.last_error = f"sendmessage: {failure}"
                await self._note(
                    f"wechat: {where} was not delivered from part {index + 1}/{len(parts)} on: "
                    f"{failure}; it stays in the session"
                )
                return
            description = (
                f"wechat: sent part {index + 1}/{len(parts)} of {where} "
                f"({len(part)} characters, client_id {client_id})"
            )
            await journaled(
                self._core, partial(self._core.kernel.perform, [], None, description=description)
            )
            live.state.sent += 1
            self._wake()

    async def _pause(self, live: _Live, detail: str) -> None:
        live.state.status = _PAUSED
        live.state.detail = (
            f"the token is stale (-14, {detail}): scan a new QR code (naga wechat bind)"
        )
        live.state.since_ns = time.time_ns()
        await self._save_state(live, f"wechat: binding {live.bot_id} paused: {live.state.detail}")
        live.scope.cancel()

    # --- binding ------------------------------------------------------------------------

    async def bind(self, req: wpb.WechatBindRequest) -> wpb.WechatBindResponse:
        try:
            return await self._bind(req)
        except PluginCallFailed as exc:
            return wpb.WechatBindResponse(login_id=req.login_id, status="failed", detail=str(exc))

    async def _bind(self, req: wpb.WechatBindRequest) -> wpb.WechatBindResponse:
        if not req.login_id:
            api_base = self._text("wechat.api_base")
            got = await self.plugin.qr(wpb.WechatQrRequest(api_base=api_base))
            if got.failure or not got.qrcode:
                return wpb.WechatBindResponse(status="failed", detail=got.detail or "no QR code")
            login_id = got.qrcode
            self._logins[login_id] = _Login(got.qrcode, got.url, api_base)
            return wpb.WechatBindResponse(login_id=login_id, status="wait", url=got.url)
        login = self._logins.get(req.login_id)
        if login is None:
            return wpb.WechatBindResponse(
                login_id=req.login_id, status="failed", detail="no such login"
            )
        wait_ms = min(req.wait_ms or self.config.poll_timeout_ms, self.config.poll_timeout_ms)
        got = await self.plugin.qr(
            wpb.WechatQrRequest(
                api_base=login.api_base,
                qrcode=login.qrcode,
                verify_code=req.verify_code,
                timeout_ms=wait_ms,
            )
        )
        answer = wpb.WechatBindResponse(login_id=req.login_id, status=got.status, url=login.url)
        if got.failure:
            answer.status, answer.detail = "wait", got.detail
        elif got.status == "scaned_but_redirect" and got.redirect_host:
            login.api_base = f"https://{got.redirect_host}"
            answer.status = "scaned"
        elif got.status in ("expired", "verify_code_blocked"):
            if login.codes >= self.config.max_codes:
                self._logins.pop(req.login_id, None)
                answer.status = "failed"
                answer.detail = f"the QR code expired {login.codes} times; start again"
            else:
                fresh = await self.plugin.qr(wpb.WechatQrRequest(api_base=login.api_base))
                login.qrcode, login.url, login.codes = fresh.qrcode, fresh.url, login.codes + 1
                answer.status, answer.url = "expired", fresh.url
                answer.detail = "a new QR code: scan it"
        elif got.status == "binded_redirect":
            self._logins.pop(req.login_id, None)
            answer.status = "confirmed"
            answer.detail = "this WeChat account is already bound to Naga"
        elif got.status == "confirmed":
            self._logins.pop(req.login_id, None)
            if not got.bot_id or not got.bot_token:
                answer.status, answer.detail = "failed", "confirmed without a bot id or token"
                return answer
            live = await self._bound(got, login)
            answer.binding.CopyFrom(self.view(live))
        return answer

    async def _bound(self, got: wpb.WechatQrResult, login: _Login) -> _Live:
        cred = wpb.WechatCredential(
            bot_id=got.bot_id,
            token=got.bot_token,
            base_url=got.base_url or login.api_base,
            owner_user_id=got.user_id,
            saved_ns=time.time_ns(),
        )
        # As T: other bindings of the same WeChat user are replaced.
        for other in list(self.live.values()):
            if other.bot_id != cred.bot_id and other.cred.owner_user_id == cred.owner_user_id:
                await self.unbind(other.bot_id)
        old = self.live.get(cred.bot_id)
        if old is not None:
            old.scope.cancel()
            cred.context_tokens.update(old.cred.context_tokens)
        await trio.to_thread.run_sync(self._creds.save, cred)
        state = wpb.WechatBinding(
            bot_id=cred.bot_id,
            owner_user_id=cred.owner_user_id,
            status=_ACTIVE,
            since_ns=time.time_ns(),
        )
        live = _Live(cred, state)
        if old is not None:
            live.replied, live.accepted = old.replied, old.accepted
            live.typing, live.seen = old.typing, old.seen
        self.live[cred.bot_id] = live
        kernel = self._core.kernel

        def record() -> None:
            kernel.register(
                CURSOR, cred.bot_id, None, description=f"wechat: bot {cred.bot_id} cursor reset"
            )

        await journaled(self._core, record)
        owner = _keys.peer_of(cred.bot_id, cred.owner_user_id)
        await self._save_state(live, f"wechat: bound bot {cred.bot_id} (owner {owner})")
        self._start(live)
        return live

    async def unbind(self, bot_id: str) -> int:
        live = self.live.pop(bot_id, None)
        if live is None:
            raise WechatNotBound(f"no binding {bot_id!r}")
        live.scope.cancel()
        for typing in live.typing.values():
            typing.scope.cancel()
        await trio.to_thread.run_sync(self._creds.delete, bot_id)
        kernel = self._core.kernel
        dropped = [k for k, p in self._pending.items() if p.bot_id == bot_id]

        def record() -> int:
            for key in dropped:
                kernel.register(PENDING, key, None, description=f"wechat: {key} dropped (unbound)")
            kernel.register(
                CURSOR, bot_id, None, description=f"wechat: bot {bot_id} cursor removed"
            )
            return kernel.register(
                BINDING, bot_id, None, description=f"wechat: unbound bot {bot_id}"
            )

        seq = await journaled(self._core, record)
        for key in dropped:
            self._pending.pop(key, None)
        self._wake()
        return seq

    def view(self, live: _Live) -> wpb.WechatBinding:
        out = wpb.WechatBinding()
        out.CopyFrom(live.state)
        out.polling = live.polling
        return out

    def bindings(self) -> list[wpb.WechatBinding]:
        return [self.view(live) for _, live in sorted(self.live.items())]

    async def send_file(self, req: wmpb.WechatSendFileRequest) -> wmpb.WechatSendFileResponse:
        """Send one image or file to a user of a binding (an irreversible
        effect once WeChat took it); the upload is the plugin's."""
        live = self.live.get(req.bot_id)
        if live is None:
            raise WechatNotBound(f"no binding {req.bot_id!r}")
        token = live.cred.context_tokens.get(req.to_user_id, "")
        if not token:
            raise WechatSendRefused(
                f"{req.to_user_id!r} has not written to bot {req.bot_id}: WeChat carries a "
                "message only in reply to one of theirs"
            )
        digest = hashlib.sha256(req.data).hexdigest()
        name = f"outbox/{digest}"
        work = os.path.join(self._home_root, "work", "plugins", "wechat")
        try:
            await trio.to_thread.run_sync(write_outbox_file, work, name, req.data)
        except (OSError, ValueError) as exc:  # the plugin's directory is not as made
            raise WechatSendRefused(f"the {_kind(req)} could not be staged: {exc}") from None
        upload = wmpb.WechatUploadRequest(
            account=self._account(live),
            to_user_id=req.to_user_id,
            context_token=token,
            client_id=_keys.client_id(f"file:{digest}:{time.time_ns()}", 0),
            file=name,
            image=req.image,
            file_name=req.file_name,
        )
        try:
            got = await self.plugin.upload(upload)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(remove_outbox_file, work, name)
        peer = _keys.peer_of(req.bot_id, req.to_user_id)
        if got.failure:
            if got.failure == F.WECHAT_FAILURE_STALE:
                await self._pause(live, f"upload: {got.detail}")
            await self._note(f"wechat: the {_kind(req)} for {peer} was not sent: {got.detail}")
            raise WechatSendRefused(f"the {_kind(req)} was not sent: {got.detail}")
        what = f"wechat: sent {_kind(req)} {req.file_name or digest[:12]!r} to {peer}"
        kernel = self._core.kernel
        seq = await journaled(
            self._core,
            lambda: kernel.perform(
                [], None, description=f"{what} ({got.size} bytes, sha256 {digest[:16]})"
            ),
        )
        live.state.sent += 1
        return wmpb.WechatSendFileResponse(seq=seq, sha256=digest, size=got.size)


def _kind(req: wmpb.WechatSendFileRequest) -> str:
    return "image" if req.image else "file"


class WechatNotBound(NotFound):
    """No binding by that bot id (NOT_FOUND)."""


class WechatSendRefused(WechatError):
    """A file could not be sent: no context token for the user, or WeChat
    or its CDN refused it (the detail says which)."""


__all__ = [
    "BINDING",
    "CURSOR",
    "PENDING",
    "ChannelConfig",
    "WechatChannel",
    "WechatNotBound",
    "WechatSendRefused",
]
