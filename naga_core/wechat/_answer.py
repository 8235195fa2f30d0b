"""Answering: each pending message's turn started in the core's lanes, its
reply chunked and sent in order, the typing indicator, a job's delivery."""

from __future__ import annotations

import logging
from functools import partial

import trio

from naga.v1 import core_pb2 as cpb
from naga.v1 import job_pb2 as jpb
from naga.v1 import turn_pb2 as tpb
from naga.v1 import wechat_pb2 as wpb
from naga_core.errors import NagaError
from naga_core.wechat import _keys
from naga_core.wechat._base import (
    PENDING,
    ChannelBase,
    ChannelCaller,
    F,
    Live,
    Order,
    TurnStream,
    Typing,
    journaled,
)
from naga_core.wechat._chunks import chunks
from naga_core.wechat._plugin import PluginCallFailed
from naga_core.wechat._sealed import stored

log = logging.getLogger("naga.wechat")
_ACTIVE = wpb.WECHAT_BINDING_STATUS_ACTIVE


class Answering(ChannelBase):
    """Turns of WeChat messages and their replies (ADR 0039)."""

    def _enqueue(self, live: Live, p: wpb.WechatPending) -> None:
        """The message's turn, started in the core once the user's previous
        one was accepted (recorded, then admitted by the core's lanes: one
        turn at a time per session, behind the global cap, like a WebChat
        message); its reply after the user's previous reply."""
        order = Order(
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
            images=p.images,
        )
        try:
            return self._agent.start(ChannelCaller(), req)
        except NagaError as exc:
            return tpb.TurnError(message=str(exc))

    # --- answering ------------------------------------------------------------------

    async def _answer(self, live: Live, p: wpb.WechatPending, order: Order) -> None:
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

    def _typing_up(self, live: Live, user: str) -> None:
        typing = live.typing.get(user)
        if typing is None:
            typing = live.typing[user] = Typing()
            assert self._nursery is not None
            self._nursery.start_soon(self._typing, live, user, typing)
        typing.count += 1

    def _typing_down(self, live: Live, user: str) -> None:
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

    async def _stop_typing(self, live: Live, user: str) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await self._send_typing(live, user, 2)

    async def _typing(self, live: Live, user: str, typing: Typing) -> None:
        with typing.scope:
            await trio.sleep(self.config.typing_after_s)
            while True:
                typing.shown = True
                await self._send_typing(live, user, 1)
                await trio.sleep(self.config.typing_every_s)

    async def _send_typing(self, live: Live, user: str, status: int) -> None:
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

    async def _reply(self, live: Live, p: wpb.WechatPending, text: str) -> None:
        parts, cut = self._parts(text)
        peer = _keys.peer_of(p.bot_id, p.user_id)
        if cut and p.sent == 0:
            await self._note(
                f"wechat: the reply to {peer} has {cut + len(parts) - 1} parts; WeChat carries "
                f"{len(parts)} per inbound message (the 10-replies rule): the last is a note, "
                f"{cut} part(s) stay in the session only"
            )
            await self._session_note(
                p.session,
                f"WeChat carries {len(parts)} messages per message it answers: the last "
                f"{cut} part(s) of this reply were not delivered (a note said so); they stay in "
                "the session",
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
                    which = f" from part {index + 1}/{len(parts)} on" if index else ""
                    await self._session_note(
                        p.session,
                        f"this reply was not delivered to {peer}{which}: {failure}; it stays "
                        "in the session",
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

    async def _send_part(self, live: Live, p: wpb.WechatPending, text: str, client_id: str) -> str:
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
        cannot go is a note in the job's session (where its owner reads the
        reply) and in the ledger, never a silent loss; each part sent is an
        irreversible effect."""
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
            await self._undelivered(job, where, "", why)
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
                # A one-part reply is just not delivered; a later part says
                # which of them went.
                which = f" from part {index + 1}/{len(parts)} on" if index else ""
                await self._undelivered(job, where, which, failure)
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

    async def _undelivered(self, job: jpb.Job, where: str, which: str, why: str) -> None:
        await self._note(
            f"wechat: {where} was not delivered{which}: {why}; it stays in the session"
        )
        text = f"not delivered to {job.deliver_to}{which}: {why}; it stays in the session"
        await self._session_note(job.session, text)


__all__ = ["Answering"]
