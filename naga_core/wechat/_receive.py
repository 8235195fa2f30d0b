"""Receiving: one long poll per binding, the dedupe, the pending records and
the cursor written together, inbound media fetched and archived."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from functools import partial

import trio

from naga.v1 import model_pb2 as mpb
from naga.v1 import wechat_pb2 as wpb
from naga_core._store import blob_store
from naga_core.agent import (
    IMAGE_MIMES,
    MAX_IMAGE_BYTES,
    MAX_IMAGES_PER_TURN,
    MAX_TURN_IMAGE_BYTES,
    AgentError,
    SessionNotFound,
)
from naga_core.errors import NagaError
from naga_core.wechat import _keys
from naga_core.wechat._answer import Answering
from naga_core.wechat._base import (
    CURSOR,
    PENDING,
    F,
    Live,
    journaled,
)
from naga_core.wechat._media import read_media_file
from naga_core.wechat._plugin import PluginCallFailed
from naga_core.wechat._sealed import stored, subject_of_user

log = logging.getLogger("naga.wechat")

_FETCHED = frozenset({2, 4, 5})
_KIND_NAMES = {2: "an image", 4: "a file", 5: "a video"}


class Receiving(Answering):
    """The long polls and what they bring in (exactly once into turns)."""

    def _start(self, live: Live) -> None:
        assert self._nursery is not None
        live.scope = trio.CancelScope()
        self._nursery.start_soon(self._run_binding, live)

    async def _run_binding(self, live: Live) -> None:
        with live.scope:
            try:
                await self._poll_loop(live)
            finally:
                live.polling = False
                self._wake()

    # --- receiving --------------------------------------------------------------------

    async def _poll_loop(self, live: Live) -> None:
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

    async def _notify(self, live: Live, which: str) -> bool:
        try:
            await self.plugin.notify(self._account(live), which)
        except PluginCallFailed:
            return False  # T ignores these failures too
        return True

    async def _known(self, live: Live, key: str, session: str) -> bool:
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

    async def _take(self, live: Live, result: wpb.WechatPollResult) -> None:
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
            text, images = await self._describe(live, m)
            fresh.append(
                wpb.WechatPending(
                    bot_id=live.bot_id,
                    user_id=user,
                    session=session,
                    key=key,
                    text=text,
                    owner=user == live.cred.owner_user_id,
                    images=images,
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

    async def _describe(self, live: Live, m: wpb.WechatMessage) -> tuple[str, list[mpb.ImagePart]]:
        """The message as text, and the images a model may be shown; media
        fetched, checked, archived, described."""
        if not any(item.type in _FETCHED for item in m.items):
            return _keys.describe(m), []
        lines: list[str] = []
        images: list[mpb.ImagePart] = []
        for item in m.items:
            if item.type not in _FETCHED:
                lines.append(_keys.describe(wpb.WechatMessage(items=[item])))
                continue
            line, image = await self._fetch(live, m.from_user_id, item)
            if image is not None:
                # Within the turn's bounds, else described only (adr 0047):
                # the message is answered either way.
                why = _unshown(images, image)
                if why:
                    line = line[:-1] + f"; not shown to the model: {why}]"
                else:
                    images.append(image)
            lines.append(line)
        return "\n".join(lines), images

    async def _fetch(
        self, live: Live, user: str, item: wpb.WechatItem
    ) -> tuple[str, mpb.ImagePart | None]:
        kind = _KIND_NAMES.get(item.type, "media")
        req = wpb.WechatMediaRequest(account=self._account(live), item=item)
        try:
            got = await self.plugin.media(req)
        except PluginCallFailed as exc:
            got = wpb.WechatMediaResult(failure=F.WECHAT_FAILURE_NETWORK, detail=str(exc))
        if got.failure:
            peer = _keys.peer_of(live.bot_id, user)
            await self._note(f"wechat: {kind} from {peer} refused: {got.detail}")
            return f"[{kind} that could not be used: {got.detail}]", None
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
            return f"[{kind} that could not be archived]", None
        size = f"{got.mime}, {got.size} bytes"
        if got.width and got.height:
            size += f", {got.width}x{got.height}"
        name = f" {item.file_name!r}" if item.file_name else ""
        text = (
            f"[{kind}{name}: {size}, sha256 {hashlib.sha256(data).hexdigest()}, kept sealed in "
            f"the blob store as {digest.hex()}]"
        )
        # The core shows it to a model that can see images, and tells one
        # that cannot (naga_core.agent._images).
        image = (
            mpb.ImagePart(blob=digest, mime=got.mime, size=got.size)
            if item.type == 2 and got.mime in IMAGE_MIMES
            else None
        )
        return text, image

    def _prune(self, live: Live, now: float) -> None:
        if len(live.seen) > 10_000:
            horizon = now - self.config.dedupe_s
            live.seen = {k: t for k, t in live.seen.items() if t >= horizon}


def _unshown(taken: list[mpb.ImagePart], image: mpb.ImagePart) -> str:
    """Why ``image`` cannot go with the ``taken`` ones to the model; empty
    if it can."""
    if image.size > MAX_IMAGE_BYTES:
        return f"larger than the {MAX_IMAGE_BYTES} bytes a model is sent"
    if len(taken) >= MAX_IMAGES_PER_TURN:
        return f"more than {MAX_IMAGES_PER_TURN} images in one message"
    if sum(i.size for i in taken) + image.size > MAX_TURN_IMAGE_BYTES:
        return f"the message's images pass {MAX_TURN_IMAGE_BYTES} bytes"
    return ""


__all__ = ["Receiving"]
