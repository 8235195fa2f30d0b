"""The WeChat channel's state and plumbing: its settings, what it keeps per
binding and per user, the plugin it drives, its ledger notes (the channel
is ``_channel``; receiving ``_receive``; answering ``_answer``)."""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import trio

import sandbox
from naga.v1 import wechat_pb2 as wpb
from naga_core._home import Home
from naga_core.agent import Agent, Core, Reloading, TurnCursor
from naga_core.egress import EgressPolicy, EgressProxies
from naga_core.errors import NagaError
from naga_core.plugins import Worker
from naga_core.supervisor import WorkerTuning
from naga_core.wechat._plugin import PluginCallFailed, WechatPlugin
from naga_core.wechat._store import Credentials

log = logging.getLogger("naga.wechat")
T = TypeVar("T")
TurnStream = TurnCursor | Reloading

BINDING = "wechat.binding"
CURSOR = "wechat.cursor"
PENDING = "wechat.pending"
F = wpb.WechatFailure
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
class ChannelCaller:
    """The channel starts turns with the core's authority; each turn's
    trust is the peer's (the binding's owner: owner; anyone else: the trust
    table's level, untrusted unless the owner raised it)."""

    owner: bool = True
    grant: None = None


@dataclass
class Typing:
    """One user's typing indicator: how many of their turns are unanswered,
    the keep-alive's scope, and whether it said 'typing' yet."""

    count: int = 0
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    shown: bool = False


@dataclass
class Order:
    """Where one message stands among its user's: the previous turn's
    acceptance and reply it waits for, its own it sets."""

    prev_accepted: trio.Event | None
    accepted: trio.Event
    prev_replied: trio.Event | None
    replied: trio.Event


@dataclass
class Live:
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
    typing: dict[str, Typing] = field(default_factory=dict[str, Typing])
    seen: dict[str, float] = field(default_factory=dict[str, float])
    polling: bool = False

    @property
    def bot_id(self) -> str:
        return self.cred.bot_id


@dataclass
class Login:
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


def _host_port(url: str) -> tuple[str, int] | None:
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


class ChannelBase:
    """What every part of the channel shares: the core, the bindings, the
    pending messages, the plugin, and the ledger notes."""

    def __init__(
        self,
        core: Core,
        home_root: str,
        agent: Agent,
        proxies: EgressProxies,
        *,
        tuning: WorkerTuning,
        report: sandbox.KernelReport,
        forker: sandbox.Forker,
        config: ChannelConfig | None = None,
    ) -> None:
        self._core = core
        self._home_root = home_root
        self._agent = agent
        self._proxies = proxies
        self._tuning = tuning
        self._report = report
        #: The core's: it forks the WeChat worker.
        self._forker = forker
        self.config = config or ChannelConfig()
        self._creds = Credentials(home_root)
        self.live: dict[str, Live] = {}
        self._pending: dict[str, wpb.WechatPending] = {}
        self._logins: dict[str, Login] = {}
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

    def _wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def _account(self, live: Live) -> wpb.WechatAccount:
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

    async def _session_note(self, session: str, text: str) -> None:
        """What WeChat did not carry, said where the owner reads the reply
        (the session's view in the console, naga log)."""
        try:
            await self._agent.note_session(session, text)
        except NagaError:
            log.exception("cannot note %r in session %s", text, session)

    async def _gave_up(self, worker: Worker, reason: str) -> None:
        await self._note(f"wechat: the plugin failed for good: {reason}")

    async def _save_state(self, live: Live, description: str) -> None:
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

    async def _pause(self, live: Live, detail: str) -> None:
        live.state.status = _PAUSED
        live.state.detail = (
            f"the token is stale (-14, {detail}): scan a new QR code (naga wechat bind)"
        )
        live.state.since_ns = time.time_ns()
        await self._save_state(live, f"wechat: binding {live.bot_id} paused: {live.state.detail}")
        live.scope.cancel()


__all__ = [
    "BINDING",
    "CURSOR",
    "PENDING",
    "F",
    "ChannelBase",
    "ChannelCaller",
    "ChannelConfig",
    "Live",
    "Login",
    "Order",
    "TurnStream",
    "Typing",
    "journaled",
]
