"""The agent side of the core: runs turns on executors and serves their
model and tool calls (docs/design/executor.md).

Everything here runs on the core's trio loop (the bridge's handlers), so the
ledger and kernel are touched by one thread. A turn: its message staged and
made durable (on a thread: the fdatasync), ``accepted``; a token minted for
the turn (role executor, bound to the session, the turn's budget, the tools
visible at the peer's trust, the risk ceiling of that trust); the job handed
to an idle executor of the pool; the executor's Complete and Call requests
checked against the token and the turn, traced and streamed as events;
the reply (or the error) recorded, ``final`` (or ``error``).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Callable

import trio

from naga.plugin import ToolSpec
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import _sessions as rec
from naga_core.agent._admit import known_turn, read_back, turn_trust
from naga_core.agent._calls import ExecutorCalls, b64, decode
from naga_core.agent._config import EXECUTOR_ROLE, AgentConfig
from naga_core.agent._core import Caller, Core, authority_of
from naga_core.agent._errors import AgentError, AgentUnavailable, SessionNotFound, TurnConflict
from naga_core.agent._sweep import TurnTokens, spent_ids
from naga_core.agent._tools import spec_for_model, visible
from naga_core.agent._turn import Expiring, Reloading, Running, TurnCursor
from naga_core.agent._workers import AgentWorkers
from naga_core.authz import BudgetAccount, Grant, Token, TokenAuthority, stage_minted
from naga_core.errors import NagaError
from naga_core.plugins import PluginError, PluginHost
from naga_plugins.executor import EXECUTOR_TOOL

log = logging.getLogger("naga.agent")

SESSION = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,127}")
#: How long a turn waits for a free executor before it fails.
EXECUTOR_WAIT_S = 30.0


class Agent:
    def __init__(
        self, core: Core, plugins: PluginHost, workers: AgentWorkers, config: AgentConfig
    ) -> None:
        self.core = core
        self.plugins = plugins
        self.workers = workers
        self.config = config
        self.running: dict[str, Running] = {}
        self._by_session: dict[str, Running] = {}
        self.sessions = rec.Sessions(
            kept=config.sessions_kept,
            keys_kept=config.keys_kept,
            busy=self._by_session.__contains__,
        )
        self._calls = ExecutorCalls(core, plugins, workers, self.running, self._stage)
        # The tokens of ended turns: what they spent is dropped from kernel
        # state once they expire.
        self._expiring = Expiring()
        #: The clock expiries are compared with: the authority's, which
        #: stamped them.
        self.clock: Callable[[], int] = lambda: authority_of(core).now_ns()
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status: trio.TaskStatus[Agent]) -> None:
        # On the loop, before the bridge serves: nothing debits meanwhile.
        tokens = TurnTokens(spent_ids(self.core.kernel))
        await trio.to_thread.run_sync(self.sessions.rebuild, self.core.ledger, tokens.see)
        self._sweep(tokens.found)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started(self)
            await trio.sleep_forever()

    @property
    def authority(self) -> TokenAuthority:
        return authority_of(self.core)

    # --- starting a turn (TurnService.Run, on the loop) --------------------------------

    def start(self, caller: Caller, req: tpb.RunTurnRequest) -> TurnCursor | Reloading:
        """The stream of the turn ``req`` starts, joins or replays. A session
        whose detail was dropped from memory is reloaded first, off the loop
        (the returned cursor does it at its first read)."""
        if self.sessions.unloaded(req.session) is not None:
            return Reloading(self, caller, req)
        known = known_turn(self.sessions, self.running, self.core.ledger, req)
        if known is not None:
            return known
        busy = self._by_session.get(req.session)
        if busy is not None:
            if busy.key == req.idempotency_key:
                return TurnCursor(busy)
            raise TurnConflict(
                f"session {req.session} already runs turn {busy.id}; wait for it, or steer or "
                "abort it",
            )
        if self._nursery is None:
            raise AgentUnavailable("the agent is not running yet")
        trust = turn_trust(self.core.kernel, caller, req.peer, req.trust)
        running = Running(
            turn_id="t-" + secrets.token_hex(8),
            session=req.session,
            key=req.idempotency_key,
            peer=req.peer,
            trust=trust,
            risk=self.config.risk_by_trust[trust],
        )
        self.running[running.id] = running
        self._by_session[req.session] = running
        self._nursery.start_soon(self._run, running, req.text)
        return TurnCursor(running)

    async def session(self, name: str) -> rec.Session:
        """The session ``name`` with its history and keys in memory (read
        back from the ledger, on a worker thread, if they were dropped)."""
        return await read_back(self.sessions, self.core.ledger, name)

    # --- running it --------------------------------------------------------------------

    async def _run(self, running: Running, text: str) -> None:
        outcome = apb.ExecutorOutcome()
        try:
            with running.scope:
                tools = visible(self.plugins, running.risk)
                token = self._turn_token(running, tools)
                await self._accept(running, text, token)
                outcome = await self._execute(running, text, token, tools)
        except (AgentError, PluginError) as exc:
            outcome = apb.ExecutorOutcome(
                error_kind=tpb.TURN_ERROR_KIND_EXECUTOR, error_message=str(exc)
            )
        except NagaError as exc:
            outcome = apb.ExecutorOutcome(
                error_kind=tpb.TURN_ERROR_KIND_INTERNAL, error_message=str(exc)
            )
        if running.aborted:
            outcome.error_kind = tpb.TURN_ERROR_KIND_ABORTED
            outcome.error_message = "the turn was aborted"
        try:
            await self._finish(running, outcome)
        finally:
            running.end()
            self.running.pop(running.id, None)
            if self._by_session.get(running.session) is running:
                del self._by_session[running.session]

    def _turn_token(self, running: Running, tools: list[ToolSpec]) -> Token:
        """The turn's executor token: its role, session, the tools visible at
        its trust, its budget, a life a minute past the turn's timeout."""
        ttl_ns = int(self.config.turn_timeout_s * 1e9) + 60_000_000_000
        token = self.authority.mint(
            EXECUTOR_ROLE,
            trust=running.trust,
            risk=running.risk,
            session=running.session,
            tools=[t.name for t in tools],
            budget=self.config.turn_budget,
            ttl_ns=ttl_ns,
        )
        running.token_id = token.id
        # Read after the mint, so never before the token's own expiry.
        running.token_expires_ns = self.clock() + ttl_ns
        return token

    async def _accept(self, running: Running, text: str, token: Token) -> None:
        body = apb.TurnRecord(
            session=running.session,
            turn_id=running.id,
            peer=running.peer,
            idempotency_key=running.key,
            text=text,
            trust=running.trust.label,
            risk_ceiling=int(running.risk),
        )
        seq = self._stage(rec.MESSAGE, body)
        # The turn token's mint rides the message's group commit: no sync of
        # its own on the turn path (bench/turn.py).
        self.core.write(
            lambda: stage_minted(self.core.ledger, token, by=f"core: turn {running.id}")
        )
        await self._settle()
        running.message_seq = seq
        running.accepted = True
        running.emit(tpb.TurnEvent(accepted=tpb.TurnAccepted(message_seq=seq, turn_id=running.id)))

    async def _execute(
        self, running: Running, text: str, token: Token, tools: list[ToolSpec]
    ) -> apb.ExecutorOutcome:
        session = self.sessions.open(running.session)
        # History holds this turn's message already (indexed when staged).
        history = session.prompt(self.config.history_entries + 1)[:-1]
        messages = [
            mpb.ChatMessage(role=mpb.ROLE_SYSTEM, content=self.config.system_prompt),
            *history,
            mpb.ChatMessage(role=mpb.ROLE_USER, content=text),
        ]
        job = apb.ExecutorJob(
            session=running.session,
            turn_id=running.id,
            token=token.to_bytes(),
            core_socket=self.core.socket,
            messages=messages,
            tools=[spec_for_model(t) for t in tools],
            max_steps=self.core.settings.get_int("agent.max_steps"),
            max_tokens=self.config.max_tokens,
        )
        worker = await self.workers.take_executor(EXECUTOR_WAIT_S)
        try:
            result, _pid = await worker.call(
                EXECUTOR_TOOL, json.dumps({"job": b64(job)}), self.config.turn_timeout_s
            )
        finally:
            self.workers.give_back(worker)
        return decode(apb.ExecutorOutcome, result, "outcome")

    async def _finish(self, running: Running, out: apb.ExecutorOutcome) -> None:
        body = apb.TurnRecord(
            session=running.session,
            turn_id=running.id,
            text=out.text,
            model_calls=out.model_calls,
            tool_calls=out.tool_calls,
            prompt_tokens=out.prompt_tokens,
            completion_tokens=out.completion_tokens,
            error_kind=out.error_kind,
            error_message=out.error_message,
            message_seq=running.message_seq,
        )
        if not running.accepted:  # nothing recorded to end
            running.emit(tpb.TurnEvent(error=_error(out)))
            return
        kind = rec.ERROR if out.error_kind else rec.REPLY
        seq = self._stage(kind, body)
        self._forget_expired(running)
        with trio.CancelScope(shield=True):
            await self._settle()
        if out.error_kind:
            running.emit(tpb.TurnEvent(error=_error(out)))
        else:
            running.emit(tpb.TurnEvent(final=rec.turn_final(out, seq)))

    def _forget_expired(self, ended: Running) -> None:
        """Queue ``ended``'s token and drop what the expired ones spent,
        staged with the turn's last record (its settle makes it durable)."""
        gone = self._expiring.push(ended.token_expires_ns, ended.token_id, self.clock())
        self._forget(gone, "their turns ended")

    def _sweep(self, tokens: list[tuple[int, bytes]]) -> None:
        """At start: queue again the turn tokens (expiry, id) that still have
        spending in kernel state, and drop what the expired ones spent in
        one effect. Staged, not synced: the first call's settle makes it
        durable (a stop before drops it, and the next start sweeps again)."""
        now = self.clock()
        gone: list[bytes] = []
        for expires_ns, token_id in tokens:
            gone += self._expiring.push(expires_ns, token_id, now)
        self._forget(gone, "their turns ended before the core started")

    def _forget(self, gone: list[bytes], why: str) -> None:
        if gone:
            account = BudgetAccount(self.core.kernel)
            self.core.write(lambda: account.forget(gone, why=why))

    @property
    def expiring(self) -> int:
        """Tokens of ended turns not yet expired (their spending still kept)."""
        return len(self._expiring)

    def _stage(self, kind: str, body: apb.TurnRecord, blobs: tuple[bytes, ...] = ()) -> int:
        seq = self.core.write(lambda: rec.stage(self.core.ledger, kind, body, blobs))
        self.sessions.note(kind, body, seq, rec.now_ns())
        return seq

    async def _settle(self) -> None:
        if await trio.to_thread.run_sync(self.core.settle):
            self.core.notify_appended()

    # --- steering and aborting -----------------------------------------------------------

    def session_turn(self, session: str) -> Running:
        running = self._by_session.get(session)
        if running is None:
            if self.sessions.get(session) is None:
                raise SessionNotFound(f"no session {session!r}")
            raise TurnConflict(f"session {session} runs no turn")
        return running

    def steer(self, req: tpb.SteerTurnRequest) -> int:
        running = self.session_turn(req.session)
        body = apb.TurnRecord(
            session=req.session,
            turn_id=running.id,
            peer=req.peer,
            idempotency_key=req.idempotency_key,
            text=req.text,
        )
        seq = self._stage(rec.STEER, body)
        running.steering.append(req.text)
        return seq

    def abort(self, session: str) -> str:
        running = self.session_turn(session)
        running.aborted = True
        running.scope.cancel()
        return running.id

    # --- the executor's calls ----------------------------------------------------------

    def turn_of(self, grant: Grant | None, session: str, turn_id: str) -> Running:
        """The running turn a call names, if the caller's token is that turn's."""
        return self._calls.turn_of(grant, session, turn_id)

    async def complete(self, p: Caller, req: apb.ModelCallRequest) -> apb.ModelCallResponse:
        return await self._calls.complete(p, req)

    async def call_tool(self, p: Caller, req: apb.ToolCallRequest) -> apb.ToolCallResponse:
        return await self._calls.call_tool(p, req)


def _error(out: apb.ExecutorOutcome) -> tpb.TurnError:
    return tpb.TurnError(
        kind=tpb.TurnErrorKind.ValueType(out.error_kind or tpb.TURN_ERROR_KIND_INTERNAL),
        message=out.error_message,
        partial_text=out.text,
    )


__all__ = ["EXECUTOR_WAIT_S", "SESSION", "Agent", "Caller", "Core"]
