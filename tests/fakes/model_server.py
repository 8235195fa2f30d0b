"""A fake model provider for tests: real HTTP/1.1 on 127.0.0.1 (an ephemeral
port), speaking the OpenAI-compatible chat completions API under
``/v1/chat/completions`` and the Anthropic messages API under
``/v1/messages``.

A test scripts the replies in order (:class:`Reply`: text, tool calls,
errors, malformed bodies, cut or stalled streams); each reply is rendered in
the dialect of the path it is asked on, streamed when the request asked for
``"stream": true``. Every request is recorded (:class:`Recorded`) with the
bytes it took on the wire. An answer scripted with ``hold="name"`` is sent
only once the test calls :meth:`FakeModelServer.release` (``name``);
:meth:`FakeModelServer.held` waits until its request has arrived.

The server is a trio task (``async with open_model_server() as server``):
readiness through ``nursery.start``, stopped by cancelling its nursery. A
stall waits for the client to hang up, not on a timer.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Literal, cast

import attrs
import h11
import trio

from tests.fakes import _render as render
from tests.fakes.strict_requests import refusal

#: Longest a stalled reply holds its connection; tests use read timeouts far
#: shorter, so this only bounds a broken test.
STALL_LIMIT_S = 30.0

Kind = Literal["answer", "error", "raw", "cut", "stall"]


@attrs.frozen(kw_only=True)
class Reply:
    """One scripted reply; build it with the class methods."""

    kind: Kind
    text: str = ""
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    usage: tuple[int, int] = (0, 0)
    model: str = "fake-model"
    finish: str = ""
    pieces: int = 3
    status: int = 200
    error_type: str = ""
    message: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    content_type: str = "application/json"
    after_events: int = 0
    in_stream_error: bool = False
    ignore_stream: bool = False
    #: Streamed answers: the n-th gate holds back what follows the n-th text
    #: piece until the test sets it (from the server's thread).
    gates: tuple[trio.Event, ...] = attrs.field(default=(), eq=False)
    hold: str = ""
    #: Streamed answers: seconds between events (a slow model, not a stall).
    pace_s: float = 0.0

    @classmethod
    def answer(
        cls,
        text: str = "",
        *,
        tool_calls: tuple[tuple[str, str, str], ...] = (),
        usage: tuple[int, int] = (12, 5),
        model: str = "fake-model",
        finish: str = "",
        pieces: int = 3,
        ignore_stream: bool = False,
        hold: str = "",
        pace_s: float = 0.0,
    ) -> Reply:
        """Text and/or tool calls ``(id, name, arguments JSON)``; streamed as
        ``pieces`` text deltas and two argument fragments per call, ``pace_s``
        apart; with ``hold``, only after ``release(hold)``."""
        return cls(
            kind="answer",
            text=text,
            tool_calls=tool_calls,
            usage=usage,
            model=model,
            finish=finish,
            pieces=pieces,
            ignore_stream=ignore_stream,
            hold=hold,
            pace_s=pace_s,
        )

    @classmethod
    def held(cls, text: str, *gates: trio.Event, pieces: int = 4) -> Reply:
        """``text`` streamed in ``pieces`` deltas, the stream held after the
        n-th piece until ``gates[n - 1]`` is set: a test sees what a client
        does with the first pieces while the rest is still to come. A gate
        not set within ``STALL_LIMIT_S`` lets the stream go on (a broken
        test is not a hung one)."""
        return cls(kind="answer", text=text, pieces=pieces, gates=gates)

    @classmethod
    def error(
        cls,
        status: int,
        message: str,
        *,
        error_type: str = "",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> Reply:
        """A provider-style error body (``{"error": {...}}`` in the path's dialect)."""
        return cls(
            kind="error", status=status, message=message, error_type=error_type, headers=headers
        )

    @classmethod
    def raw(
        cls, body: bytes, *, status: int = 200, content_type: str = "application/json"
    ) -> Reply:
        """Exactly these bytes as the body (malformed answers, odd event streams)."""
        return cls(kind="raw", body=body, status=status, content_type=content_type)

    @classmethod
    def cut(cls, text: str, *, after_events: int, pieces: int = 4) -> Reply:
        """Start answering ``text``, then close the connection after
        ``after_events`` events (or half the body when not streamed)."""
        return cls(kind="cut", text=text, pieces=pieces, after_events=after_events)

    @classmethod
    def stall(cls, text: str = "", *, after_events: int = 0, pieces: int = 4) -> Reply:
        """Send nothing (or ``after_events`` events), then wait until the
        client gives up."""
        return cls(kind="stall", text=text, pieces=pieces, after_events=after_events)

    @classmethod
    def stream_error(cls, text: str, *, after_events: int, error_type: str, message: str) -> Reply:
        """A streamed answer that reports an error event after ``after_events``."""
        return cls(
            kind="answer",
            text=text,
            pieces=4,
            after_events=after_events,
            in_stream_error=True,
            error_type=error_type,
            message=message,
        )


@attrs.frozen
class Recorded:
    """A request as the server received it."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    #: Bytes on the wire: request line, headers and body.
    wire_bytes: int

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name.lower():
                return value
        return None

    def json(self) -> dict[str, Any]:
        return cast("dict[str, Any]", json.loads(self.body))


class FakeModelServer:
    """The scripted server; see the module docstring."""

    def __init__(self, *, strict: bool = False) -> None:
        self._replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        #: With ``strict``, every request body is checked as the real server
        #: checks it (tests/fakes/strict_requests.py); a refused one is
        #: answered 400 with the reason (no scripted reply used) and kept here.
        self.strict = strict
        self.refused: list[tuple[Recorded, str]] = []
        #: Asked first for every request: a Reply answers it (the script is
        #: left alone), None leaves it to the script.
        self.responder: Callable[[Recorded], Reply | None] | None = None
        #: Requests that found no scripted reply (answered with a 400).
        self.unexpected: list[Recorded] = []
        self.port = 0
        self._arrived: dict[str, trio.Event] = {}
        self._holding: list[tuple[Recorded, str]] = []
        self._released: dict[str, trio.Event] = {}
        #: Seconds each answered request spent here, from its last byte read
        #: to its answer's last byte written (a bench subtracts it from a
        #: turn's wall time: what is left is the runtime's overhead).
        self.answer_s: list[float] = []
        #: TCP connections accepted (a client that reuses one opens one).
        self.connections = 0

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    def forget_script(self) -> int:
        """Drop the scripted replies not yet used; how many there were.
        Between tests sharing a server: one that failed midway must not
        leave its replies to the next one's requests."""
        left = len(self._replies)
        self._replies.clear()
        return left

    def _gate(self, gates: dict[str, trio.Event], name: str) -> trio.Event:
        return gates.setdefault(name, trio.Event())

    async def held(self, name: str) -> Recorded:
        """Wait until the request a ``hold=name`` reply answers has arrived."""
        await self._gate(self._arrived, name).wait()
        return next(r for r, held in self._holding if held == name)

    def release(self, name: str) -> None:
        """Let the ``hold=name`` reply go (now or when its request comes)."""
        self._gate(self._released, name).set()

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        return len(self._replies)

    async def serve(
        self,
        port: int = 0,
        *,
        task_status: trio.TaskStatus[FakeModelServer] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``port`` (0: an ephemeral one) until cancelled."""
        async with trio.open_nursery() as nursery:
            serve = partial(trio.serve_tcp, self._connection, port, host="127.0.0.1")
            listeners = cast("list[trio.SocketListener]", await nursery.start(serve))
            self.port = cast("tuple[str, int]", listeners[0].socket.getsockname())[1]
            task_status.started(self)

    async def _connection(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                recorded = await _receive(stream, conn)
                if recorded is None:
                    return
                self.requests.append(recorded)
                received = trio.current_time()
                why = self._refusal(recorded)
                answer = self.responder(recorded) if self.responder and not why else None
                if why:
                    self.refused.append((recorded, why))
                    reply = Reply.error(400, f"fake model server (strict): {why}")
                elif answer is not None:
                    reply = answer
                elif is_review(recorded) and not (
                    self._replies and _answers_review(self._replies[0])
                ):
                    # A skills review (on by default, ADR 0060) that the test
                    # did not script: "nothing", its usual answer, without
                    # taking the reply scripted for whatever comes next.
                    reply = _NOTHING_TO_REVIEW
                elif not self._replies:
                    self.unexpected.append(recorded)
                    reply = Reply.error(
                        400, f"fake model server: no scripted reply for {recorded.path}"
                    )
                else:
                    reply = self._replies.popleft()
                if reply.hold:
                    self._holding.append((recorded, reply.hold))
                    self._gate(self._arrived, reply.hold).set()
                    await self._gate(self._released, reply.hold).wait()
                keep = await self._respond(stream, conn, recorded, reply)
                self.answer_s.append(trio.current_time() - received)
                if not keep:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return  # the client hung up or sent garbage; nothing to answer
        finally:
            await stream.aclose()

    def _refusal(self, recorded: Recorded) -> str:
        dialect = render.dialect_of(recorded.path)
        if not self.strict or dialect is None:
            return ""
        try:
            body = recorded.json()
        except ValueError as exc:
            return f"the body is not JSON: {exc}"
        return refusal("openai" if dialect == "openai" else "anthropic", body)

    async def _respond(
        self, stream: trio.SocketStream, conn: h11.Connection, request: Recorded, reply: Reply
    ) -> bool:
        """Answer; False when the connection must close afterwards."""
        dialect = render.dialect_of(request.path)
        if dialect is None:
            body = b'{"error":{"message":"fake model server: no such route"}}'
            await _send_body(stream, conn, 404, "application/json", body)
            return True
        streamed = bool(request.json().get("stream")) and not reply.ignore_stream
        if reply.kind == "error":
            body = render.error_body(dialect, reply.status, reply.error_type, reply.message)
            await _send_body(
                stream, conn, reply.status, "application/json", body, extra=reply.headers
            )
            return True
        if reply.kind == "raw":
            await _send_body(stream, conn, reply.status, reply.content_type, reply.body)
            return True
        if not streamed:
            body = render.body(dialect, reply)
            if reply.kind == "answer":
                await _send_body(stream, conn, 200, "application/json", body)
                return True
            if reply.kind == "cut":
                await _send_head(stream, conn, 200, "application/json", length=len(body))
                await stream.send_all(conn.send(h11.Data(data=body[: len(body) // 2])))
                return False
            await _wait_for_hangup(stream)
            return False
        events = render.events(dialect, reply, include_usage=_wants_usage(request))
        if reply.kind == "answer" and not reply.in_stream_error:
            holds = dict(zip(render.after_pieces(dialect, reply), reply.gates, strict=False))
            await _send_head(stream, conn, 200, "text/event-stream", length=None)
            for index, event in enumerate(events):
                if index and reply.pace_s:
                    await trio.sleep(reply.pace_s)  # the model writing, slowly
                await stream.send_all(conn.send(h11.Data(data=event)))
                gate = holds.get(index)
                if gate is not None:
                    with trio.move_on_after(STALL_LIMIT_S):
                        await gate.wait()
            await stream.send_all(conn.send(h11.EndOfMessage()))
            return True
        if reply.kind == "stall" and reply.after_events == 0:
            await _wait_for_hangup(stream)
            return False
        await _send_head(stream, conn, 200, "text/event-stream", length=None)
        for event in events[: reply.after_events]:
            await stream.send_all(conn.send(h11.Data(data=event)))
        if reply.in_stream_error:
            event = render.error_event(dialect, reply.error_type, reply.message)
            await stream.send_all(conn.send(h11.Data(data=event)))
            await stream.send_all(conn.send(h11.EndOfMessage()))
            return True
        if reply.kind == "stall":
            await _wait_for_hangup(stream)
        return False  # a cut: close without the terminating chunk


def _wants_usage(request: Recorded) -> bool:
    options = request.json().get("stream_options")
    return isinstance(options, dict) and bool(cast("dict[str, Any]", options).get("include_usage"))


async def _receive(stream: trio.SocketStream, conn: h11.Connection) -> Recorded | None:
    head: h11.Request | None = None
    body = bytearray()
    wire = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            wire += len(data)
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return Recorded(
                method=head.method.decode(),
                path=head.target.decode(),
                headers=tuple((k.decode().lower(), v.decode()) for k, v in head.headers),
                body=bytes(body),
                wire_bytes=wire,
            )
        else:  # ConnectionClosed, or PAUSED after a close
            return None


async def _send_head(
    stream: trio.SocketStream,
    conn: h11.Connection,
    status: int,
    content_type: str,
    *,
    length: int | None,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    headers = [("content-type", content_type), *extra]
    if length is None:
        headers.append(("transfer-encoding", "chunked"))
    else:
        headers.append(("content-length", str(length)))
    await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))


async def _send_body(
    stream: trio.SocketStream,
    conn: h11.Connection,
    status: int,
    content_type: str,
    body: bytes,
    *,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    await _send_head(stream, conn, status, content_type, length=len(body), extra=extra)
    await stream.send_all(conn.send(h11.Data(data=body)))
    await stream.send_all(conn.send(h11.EndOfMessage()))


async def _wait_for_hangup(stream: trio.SocketStream) -> None:
    with trio.move_on_after(STALL_LIMIT_S):
        while await stream.receive_some(65536):
            pass


@asynccontextmanager
async def open_model_server(
    port: int = 0, *, strict: bool = False
) -> AsyncGenerator[FakeModelServer]:
    """A running server for the body of the ``async with``."""
    async with trio.open_nursery() as nursery:
        fake = FakeModelServer(strict=strict)
        server = cast("FakeModelServer", await nursery.start(fake.serve, port))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


#: The review tool's name (naga_core.skills.REVIEW_TOOL).
_REVIEW_TOOL = "skill_review"
_NOTHING_TO_REVIEW = Reply.answer(tool_calls=(("review-none", _REVIEW_TOOL, '{"action": "none"}'),))


def is_review(recorded: Recorded) -> bool:
    """A skills review's model call: its tool choice names the review tool."""
    try:
        choice = recorded.json().get("tool_choice")
    except ValueError:
        return False
    return choice is not None and _REVIEW_TOOL in json.dumps(choice)


def _answers_review(reply: Reply) -> bool:
    return any(name == _REVIEW_TOOL for _id, name, _args in reply.tool_calls)
