"""Event streams: what each peer is shown, numbered so it can detect gaps
and resume after a reconnect.

Every event passes the trust policy (``naga.policy``) for each stream's
peer before it is numbered into that stream, so a peer's sequence numbers
count only what it may see and a gap always means a lost event. A stream
outlives its connection: a client that reconnects with its stream id and
the last seq it saw gets what it missed, if the stream still holds it.
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict, deque
from typing import Any

import attrs
import trio

from naga.policy import EventKind, Scope, TrustPolicy, policy_for
from naga.trust import TrustLevel
from naga.v1 import turn_pb2 as tpb

STREAM_BUFFER = 1024
MAX_STREAMS = 256


@attrs.frozen
class Peer:
    """Who is connected: ``<channel>:<id>`` and its trust level."""

    id: str
    level: TrustLevel

    @property
    def policy(self) -> TrustPolicy:
        return policy_for(self.level)

    @property
    def session_prefix(self) -> str:
        """The sessions a non-owner may use are named ``<peer>.<name>``."""
        return f"{self.id}."

    def may_use(self, session: str) -> bool:
        return self.level is TrustLevel.OWNER or session.startswith(self.session_prefix)

    def scope(self, session: str, origin: frozenset[str]) -> Scope:
        if self.id in origin:
            return Scope.OWN
        if self.may_use(session) and self.level is not TrustLevel.OWNER:
            return Scope.SESSION
        return Scope.OTHER


def _encoded_rest(event: str, session: str, data: dict[str, Any]) -> str:
    """An event frame's JSON after its ``seq`` member, up to the closing brace."""
    body = json.dumps({"event": event, "session": session, "data": data}, ensure_ascii=False)
    return body[1:]


class Stream:
    """One peer's numbered events (seq from 1), the last ``STREAM_BUFFER``
    kept for resuming."""

    def __init__(self, stream_id: str, peer: Peer) -> None:
        self.id = stream_id
        self.peer = peer
        self.last_seq = 0
        self._buf: deque[tuple[int, bytes]] = deque(maxlen=STREAM_BUFFER)
        self._changed = trio.Event()

    def push(self, event: str, session: str, data: dict[str, Any]) -> None:
        self.push_encoded(_encoded_rest(event, session, data))

    def push_encoded(self, rest: str) -> None:
        """Number and keep one event whose fields after ``seq`` are already
        encoded (:func:`_encoded_rest`): an event shown to many peers is
        encoded once, not once per stream."""
        self.last_seq += 1
        frame = f'{{"type": "event", "seq": {self.last_seq}, {rest}'
        self._buf.append((self.last_seq, frame.encode()))
        self._changed.set()
        self._changed = trio.Event()

    def since(self, after: int) -> list[tuple[int, bytes]] | None:
        """``(seq, frame)`` after seq ``after``; None when some were already
        dropped."""
        if after >= self.last_seq:
            return []
        if not self._buf or self._buf[0][0] > after + 1:
            return None
        return [(seq, frame) for seq, frame in self._buf if seq > after]

    async def wait_after(self, after: int) -> None:
        while self.last_seq <= after:
            await self._changed.wait()


class Hub:
    """Every open stream; implements the lanes' listener."""

    def __init__(self, tool_risk: dict[str, int] | None = None) -> None:
        self._streams: OrderedDict[str, Stream] = OrderedDict()
        #: Known tools' risk levels; a tool not here counts as R4.
        self.tool_risk: dict[str, int] = dict(tool_risk or {})
        # A finished call names no tool; its start did. By session, and
        # dropped when its turn ends: a call whose finish never comes (an
        # aborted turn) must not stay for ever, and call ids (the model's)
        # repeat across turns and sessions.
        self._tool_of: dict[str, dict[str, str]] = {}

    def open(self, peer: Peer, resume: tuple[str, int] | None) -> tuple[Stream, bool]:
        """The stream to attach to, and whether it resumes the one asked
        for with nothing lost (else the client reloads its views)."""
        if resume is not None:
            old = self._streams.get(resume[0])
            if old is not None and old.peer == peer:
                self._streams.move_to_end(old.id)
                return old, old.since(resume[1]) is not None
        stream = Stream(secrets.token_urlsafe(12), peer)
        self._streams[stream.id] = stream
        while len(self._streams) > MAX_STREAMS:
            self._streams.popitem(last=False)
        return stream, False

    def publish(
        self,
        kind: EventKind,
        session: str,
        origin: frozenset[str],
        data: dict[str, Any],
        tool: str | None = None,
    ) -> None:
        risk = None if tool is None else self.tool_risk.get(tool)
        rest: str | None = None
        for stream in self._streams.values():
            peer = stream.peer
            if peer.policy.sees(kind, peer.scope(session, origin), risk):
                if rest is None:
                    rest = _encoded_rest(kind.value, session, data)
                stream.push_encoded(rest)

    # --- the lanes' listener -----------------------------------------------------

    def message(self, session: str, peer: str, text: str, seq: int) -> None:
        data = {"peer": peer, "text": text, "seq": seq}
        self.publish(EventKind.MESSAGE, session, frozenset({peer}), data)

    def queued(self, session: str, peer: str, key: str, position: int) -> None:
        data = {"key": key, "position": position}
        self.publish(EventKind.QUEUED, session, frozenset({peer}), data)

    @property
    def open_tool_calls(self) -> int:
        """Tool calls started and not yet finished, in turns not yet ended."""
        return sum(len(calls) for calls in self._tool_of.values())

    def turn_event(self, session: str, peers: frozenset[str], event: tpb.TurnEvent) -> None:
        which = event.WhichOneof("kind")
        if which == "accepted":
            a = event.accepted
            data = {"turn": a.turn_id, "message_seq": a.message_seq, "replayed": a.replayed}
            self.publish(EventKind.ACCEPTED, session, peers, data)
        elif which == "delta":
            self.publish(EventKind.DELTA, session, peers, {"text": event.delta.text})
        elif which == "tool_started":
            t = event.tool_started
            self._tool_of.setdefault(session, {})[t.call_id] = t.tool
            data = {"call": t.call_id, "tool": t.tool, "arguments": t.arguments_json}
            self.publish(EventKind.TOOL_STARTED, session, peers, data, tool=t.tool)
        elif which == "tool_finished":
            f = event.tool_finished
            tool = self._tool_of.get(session, {}).pop(f.call_id, None)
            data = {"call": f.call_id, "ok": f.ok, "result": f.result_json, "error": f.error}
            self.publish(EventKind.TOOL_FINISHED, session, peers, data, tool=tool)
        elif which == "approval":  # the owner's card (EventKind.APPROVAL: owner only)
            a = event.approval
            data = {
                "id": a.id,
                "call": a.call_id,
                "tool": a.tool,
                "risk": a.risk,
                "arguments": a.arguments_json,
                "asked_ns": a.asked_ns,
                "expires_ns": a.expires_ns,
            }
            self.publish(EventKind.APPROVAL, session, peers, data)
        elif which == "final":
            self._tool_of.pop(session, None)
            f = event.final
            self.publish(
                EventKind.FINAL, session, peers, {"text": f.text, "reply_seq": f.reply_seq}
            )
            usage = {
                "model_calls": f.model_calls,
                "tool_calls": f.tool_calls,
                "prompt_tokens": f.prompt_tokens,
                "completion_tokens": f.completion_tokens,
            }
            self.publish(EventKind.USAGE, session, peers, usage)
        elif which == "error":
            self._tool_of.pop(session, None)
            e = event.error
            kind = tpb.TurnErrorKind.Name(e.kind).removeprefix("TURN_ERROR_KIND_").lower()
            data = {"kind": kind, "message": e.message, "partial": e.partial_text}
            self.publish(EventKind.ERROR, session, peers, data)


__all__ = ["Hub", "Peer", "Stream"]
