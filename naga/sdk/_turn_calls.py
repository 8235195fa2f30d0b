"""The client's calls of the TurnService (the owner's CLI, the gateway) and
the agent executor's calls of the ModelService and ToolService."""

from __future__ import annotations

from collections.abc import Sequence

from naga.sdk._rpc import Events, Rpc
from naga.sdk._transport import StreamCall
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb

_TURN = "/naga.v1.TurnService/"
_MODEL = "/naga.v1.ModelService/"
_TOOL = "/naga.v1.ToolService/"


class TurnEvents(Events[tpb.TurnEvent]):
    """An open Run stream: iterate for :class:`naga.v1.turn_pb2.TurnEvent`s.
    ``cancel()`` ends the stream; the turn goes on in the core."""

    def __init__(self, call: StreamCall) -> None:
        super().__init__(call, tpb.TurnEvent, "Run")


class TurnCalls(Rpc):
    # --- turns (the owner's CLI, the gateway) --------------------------------------

    def run_turn(
        self,
        session: str,
        text: str,
        idempotency_key: str,
        *,
        peer: str = "",
        timeout: float | None = None,
        mode: tpb.QueueMode.ValueType = tpb.QUEUE_MODE_UNSPECIFIED,
        waited_ms: int = 0,
        images: Sequence[mpb.ImagePart] = (),
    ) -> TurnEvents:
        """Run one turn; iterate the result for its events (``accepted``
        first, ``final`` or ``error`` last). ``timeout`` bounds the whole
        stream (None: no bound). ``mode``: what to do when the session runs
        a turn already (unspecified: refuse; followup, collect, interrupt:
        the core records the message and queues it). ``waited_ms``: how long
        a channel held the message before this call (the turn's deadline
        counts from the channel's acceptance). ``images``: references to
        images sealed in the blob store under the sender's subject
        (docs/adr/0047-vision16-images.md)."""
        req = tpb.RunTurnRequest(
            session=session,
            text=text,
            idempotency_key=idempotency_key,
            peer=peer,
            mode=mode,
            waited_ms=waited_ms,
            images=images,
        )
        return TurnEvents(self._stream(_TURN + "Run", req, timeout))

    def steer_turn(
        self,
        session: str,
        text: str,
        idempotency_key: str,
        *,
        peer: str = "",
        timeout: float | None = None,
    ) -> int:
        """Steer the session's running turn: its model sees ``text`` at its
        next call; the steering message's seq. FailedPrecondition when no
        turn runs or it takes no more steering (send a message instead)."""
        req = tpb.SteerTurnRequest(
            session=session, text=text, idempotency_key=idempotency_key, peer=peer
        )
        return self._write(_TURN + "Steer", req, tpb.SteerTurnResponse, timeout).message_seq

    def abort_turn(self, session: str, *, timeout: float | None = None) -> str:
        """Stop the session's running turn; its id."""
        req = tpb.AbortTurnRequest(session=session)
        return self._write(_TURN + "Abort", req, tpb.AbortTurnResponse, timeout).turn_id

    def sessions(
        self, limit: int = 0, *, include_archived: bool = False, timeout: float | None = None
    ) -> list[tpb.SessionSummary]:
        """The sessions, most recent first (``limit`` 0: the core's default);
        archived ones only with ``include_archived``."""
        req = tpb.ListSessionsRequest(limit=limit, include_archived=include_archived)
        answer = self._read(_TURN + "ListSessions", req, tpb.ListSessionsResponse, timeout)
        return list(answer.sessions)

    def session_history(
        self, session: str, limit: int = 0, *, timeout: float | None = None
    ) -> list[tpb.SessionEntry]:
        """One session's messages and replies, oldest first."""
        req = tpb.SessionHistoryRequest(session=session, limit=limit)
        answer = self._read(_TURN + "History", req, tpb.SessionHistoryResponse, timeout)
        return list(answer.entries)

    # --- the agent executor's calls ------------------------------------------------

    def complete(
        self, request: apb.ModelCallRequest, *, timeout: float | None = None
    ) -> apb.ModelCallResponse:
        """One model call through the core (an executor's token)."""
        return self._write(_MODEL + "Complete", request, apb.ModelCallResponse, timeout)

    def call_tool(
        self, request: apb.ToolCallRequest, *, timeout: float | None = None
    ) -> apb.ToolCallResponse:
        """One tool call through the core (an executor's token)."""
        return self._write(_TOOL + "Call", request, apb.ToolCallResponse, timeout)

    def call_step(
        self, request: apb.ToolStepRequest, *, timeout: float | None = None
    ) -> apb.ToolStepResponse:
        """The tool calls of one model step through the core (an executor's
        token), answered in their order."""
        return self._write(_TOOL + "CallStep", request, apb.ToolStepResponse, timeout)


__all__ = ["TurnCalls", "TurnEvents"]
