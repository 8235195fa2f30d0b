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
import re
import time

import trio
from google.protobuf.message import DecodeError

from naga.v1 import wechat_media_pb2 as wmpb
from naga.v1 import wechat_pb2 as wpb
from naga_core._store import blob_store
from naga_core.agent import AgentError, SessionNotFound
from naga_core.errors import NagaError, NotFound
from naga_core.wechat import _keys
from naga_core.wechat._base import (
    BINDING,
    CURSOR,
    PENDING,
    F,
    Live,
    Login,
    journaled,
)
from naga_core.wechat._media import remove_outbox_file, write_outbox_file
from naga_core.wechat._plugin import PluginCallFailed, WechatPlugin, write_manifest
from naga_core.wechat._receive import Receiving
from naga_core.wechat._sealed import loaded, subject_of_user
from naga_core.wechat._store import CredentialsInvalid, WechatError

log = logging.getLogger("naga.wechat")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_ACTIVE = wpb.WECHAT_BINDING_STATUS_ACTIVE
_PAUSED = wpb.WECHAT_BINDING_STATUS_PAUSED


class WechatChannel(Receiving):
    """``await nursery.start(channel.serve)``; its RPCs through ``_service``."""

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
            forker=self._forker,
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
            live = Live(cred, binding, cursor=cursor if isinstance(cursor, str) else "")
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
            self._logins[login_id] = Login(got.qrcode, got.url, api_base)
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

    async def _bound(self, got: wpb.WechatQrResult, login: Login) -> Live:
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
        live = Live(cred, state)
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

    def view(self, live: Live) -> wpb.WechatBinding:
        out = wpb.WechatBinding()
        out.CopyFrom(live.state)
        out.polling = live.polling
        return out

    def bindings(self) -> list[wpb.WechatBinding]:
        return [self.view(live) for _, live in sorted(self.live.items())]

    async def session_blob(self, bot_id: str, user_id: str, digest: str) -> bytes:
        """The content of blob ``digest`` if it is one of the (binding, user)
        session's own: its records name it (a media it received is described
        with it) and it is sealed under that user's key (the subject is bound
        into the box: a message that only types another's digest does not
        make it theirs). WechatSendRefused otherwise, the same words whether
        or not the blob exists (no probing for others' blobs)."""
        live = self.live.get(bot_id)
        if live is None:
            raise WechatNotBound(f"no binding {bot_id!r}")
        who = subject_of_user(bot_id, user_id, owner=user_id == live.cred.owner_user_id)
        refused = WechatSendRefused(
            f"blob {digest} is not one of this conversation's (a file or image its user sent "
            "here): only those, or a file of the workspace, can be sent"
        )
        if not _DIGEST.fullmatch(digest):
            raise refused
        try:
            found = await self._agent.session(_keys.session_of(bot_id, user_id))
        except (SessionNotFound, AgentError):
            raise refused from None
        if not any(digest in e.text for e in found.entries):
            raise refused
        try:
            data = await trio.to_thread.run_sync(blob_store(self.home).get, bytes.fromhex(digest))
        except (NagaError, ValueError):
            raise refused from None
        sealer = self._agent.memory.sealer
        if sealer.blob_subject(data) != who:
            raise refused
        opened = sealer.open_blob(data)
        if opened is None:
            raise WechatSendRefused(f"blob {digest} is of a forgotten subject: it cannot be read")
        return opened

    def peers(self) -> list[str]:
        """Whom a job can deliver to: each binding's owner and every user who
        wrote to it, as WeChat peers (``wechat:<bot id>/<user id>``)."""
        found: list[str] = []
        for bot_id, live in sorted(self.live.items()):
            users = {live.cred.owner_user_id, *live.cred.context_tokens}
            found += [_keys.peer_of(bot_id, user) for user in sorted(users) if user]
        return found

    def delivery_peer(self, target: str) -> str:
        """The WeChat peer ``target`` names: ``wechat:<bot>/<user>`` (one of
        :meth:`peers`), ``wechat:<bot>`` (that binding's owner) or ``wechat``
        (the owner of the only binding); WechatPeerUnknown naming the peers
        there are otherwise."""
        bot, _, user = target.removeprefix("wechat:").partition("/")
        if target == "wechat":
            bots = sorted(self.live)
            bot = bots[0] if len(bots) == 1 else ""
        elif not target.startswith("wechat:"):
            bot = ""
        live = self.live.get(bot)
        if live is not None and not user:
            user = live.cred.owner_user_id
        peer = _keys.peer_of(bot, user)
        peers = self.peers()
        if live is not None and peer in peers:
            return peer
        if not peers:
            raise WechatPeerUnknown(
                f"no WeChat peer {target!r}: nothing is bound to WeChat (naga wechat bind)"
            )
        if target == "wechat" and len(self.live) > 1:
            raise WechatPeerUnknown(
                f"'wechat' names the owner of the only binding, and there are {len(self.live)}: "
                f"name one of the bound peers: {', '.join(peers)}"
            )
        raise WechatPeerUnknown(
            f"no WeChat peer {target!r}; the bound peers (each binding's owner and the users "
            f"who wrote to it) are: {', '.join(peers)}"
        )

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


class WechatPeerUnknown(WechatError):
    """A job's WeChat target is not a bound peer (the detail names those
    there are)."""


class WechatSendRefused(WechatError):
    """A file could not be sent: no context token for the user, or WeChat
    or its CDN refused it (the detail says which)."""


__all__ = [
    "WechatChannel",
    "WechatNotBound",
    "WechatPeerUnknown",
    "WechatSendRefused",
]
