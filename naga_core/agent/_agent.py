"""The agent side of the core: runs turns on executors and serves their
model and tool calls (docs/design/executor.md).

Everything here runs on the core's trio loop (the bridge's handlers), so the
ledger and kernel are touched by one thread. A turn: its message staged and
made durable (on a thread: the fdatasync), ``accepted``; a token minted for
the turn from the trust table's row of the peer's trust (naga.policy: role
executor, the peer as its principal, bound to the session, the row's
budget, risk ceiling and visible tools), whose standing the turn holds
while it runs (a lowered trust ends it: _trust_cut); the job handed
to an idle executor of the pool; the executor's Complete and Call requests
checked against the token and the turn, traced and streamed as events;
the reply (or the error) recorded, ``final`` (or ``error``).
"""

from __future__ import annotations

import functools
import logging
import re
import secrets
from collections.abc import Callable, Sequence

import trio

from naga.constants import SESSION_PATTERN
from naga.plugin import ToolSpec
from naga.tokens import Risk
from naga.trust import TrustLevel, UnknownTrustLevel
from naga.v1 import agent_pb2 as apb
from naga.v1 import turn_pb2 as tpb
from naga_core._store import blob_store
from naga_core.agent import _images, _recover
from naga_core.agent import _sessions as rec
from naga_core.agent._admit import known_turn, read_back, turn_trust, with_previews
from naga_core.agent._calls import RECORD_MARGIN_S, ExecutorCalls
from naga_core.agent._config import EXECUTOR_ROLE, AgentConfig
from naga_core.agent._core import Caller, Core, Standing, StandingOf, authority_of
from naga_core.agent._core_tools import CoreTools
from naga_core.agent._errors import (
    AgentError,
    AgentUnavailable,
    NoTurnRunning,
    SessionNotFound,
    TurnConflict,
)
from naga_core.agent._job import EXECUTOR_WAIT_S, Jobs
from naga_core.agent._lanes import QUEUED_MODES, Admission, Cap, Waiting
from naga_core.agent._memory_tools import MemoryTools
from naga_core.agent._memory_tools import offered_names as memory_tool_names
from naga_core.agent._results import Stored
from naga_core.agent._rewind import Rewind
from naga_core.agent._sealing import record_subject, reopen_turns
from naga_core.agent._skill_use import SkillUse
from naga_core.agent._startfold import StartFold
from naga_core.agent._sweep import spent_ids
from naga_core.agent._tool_calls import ToolCalls, journal_reply, offered_to
from naga_core.agent._trust_cut import TurnCut
from naga_core.agent._turn import Expiring, Reloading, Running, TurnCursor
from naga_core.agent._workers import AgentWorkers
from naga_core.authz import (
    BudgetAccount,
    EndedTokens,
    Grant,
    Token,
    TokenAuthority,
    stage_minted,
)
from naga_core.errors import NagaError
from naga_core.plugins import PluginError, PluginHost
from naga_core.skills import Library

log = logging.getLogger("naga.agent")

SESSION = re.compile(SESSION_PATTERN)
MAX_CONCURRENT = "lanes.max_concurrent"


class Agent:
    def __init__(
        self,
        core: Core,
        plugins: PluginHost,
        workers: AgentWorkers,
        config: AgentConfig,
        *,
        standing_of: StandingOf,
        tools: ToolCalls,
        ended: EndedTokens | None = None,
        memory: MemoryTools | None = None,
        skills: Library | None = None,
    ) -> None:
        self.core = core
        #: The memory store and its tools (naga_core.memory).
        self.memory = memory if memory is not None else MemoryTools(core)
        self.skills = skills
        if skills is not None and skills.store.sealer is None:
            # Session and peer skills seal under their subjects' keys, the
            # memory store's ring: a forget is seen by the library at once.
            skills.store.sealer = self.memory.sealer
        self.skill_use = (
            SkillUse(core, skills, self.memory.sealer.open_turn) if skills is not None else None
        )
        #: The turn tokens that can never spend again, for the kernel's
        #: refund ratchet (a fresh set when none is wired: refunds stay
        #: raises, failing closed).
        self.ended = EndedTokens() if ended is None else ended
        self._standing_of = standing_of
        self.plugins = plugins
        self.workers = workers
        self.config = config
        self.running: dict[str, Running] = {}
        #: Per-session turns, their lanes and lanes.max_concurrent: the core
        #: admits turns to execute, whoever sent them
        #: (docs/adr/0028-lanes-core-admission.md).
        self._admission = Admission(lambda: core.settings.get_int(MAX_CONCURRENT))
        self._lanes = self._admission.lanes
        self._cap = self._admission.cap
        self.sessions = rec.Sessions(
            kept=config.sessions_kept,
            keys_kept=config.keys_kept,
            busy=self._admission.busy,
            opener=self.memory.sealer.open_turn,
        )
        self.tools = tools
        #: Tools the core answers itself (the scheduler's job.create).
        self.core_tools = CoreTools()
        self._calls = ExecutorCalls(
            core,
            plugins,
            workers,
            self.running,
            self._stage,
            tools=tools,
            settle=self._settle,
            core_tools=self.core_tools,
            memory=self.memory,
            skills=self.skill_use,
        )
        self._jobs = Jobs(
            core,
            config,
            workers,
            self.sessions,
            self._calls,
            memory=self.memory,
            skill_use=self.skill_use,
            core_tools=self.core_tools,
            constitution=self._constitution_now,
            mint=self._turn_token,
        )
        # The tokens of ended turns: what they spent is dropped from kernel
        # state once they expire.
        self._expiring = Expiring()
        #: The clock expiries are compared with: the authority's, which
        #: stamped them.
        self.clock: Callable[[], int] = lambda: authority_of(core).now_ns()
        self._nursery: trio.Nursery | None = None
        self._recovering = trio.Event()
        #: The start-up fold, once serve() built it (the snapshot writer's).
        self.fold: StartFold | None = None
        #: The verified constitution's text (INV-5), for every turn's prompt.
        self.constitution: Callable[[], str] = lambda: ""

    async def serve(
        self,
        cleaned: Sequence[str] = (),
        crashed: bool = False,
        fold: StartFold | None = None,
        *,
        task_status: trio.TaskStatus[Agent],
    ) -> None:
        """Rebuild the sessions, end or re-run the turns the last stop left
        open (docs/design/recovery.md), then serve. ``cleaned``: what the
        start's open cleaned; ``crashed``: the last core did not stop
        cleanly. Both go into the start's note in the kernel's history.
        ``fold``: the start-up fold restored from a snapshot (else one from
        nothing); it is brought to the ledger's head here, and kept
        (:attr:`fold`) for the next snapshot."""
        if fold is None:
            fold = self.new_fold()
        await trio.to_thread.run_sync(fold.advance, self.core.ledger)
        # Spending a rollback brought back after a prune: its tokens again.
        await trio.to_thread.run_sync(fold.resolve, self.core.ledger)
        self.fold = fold
        # Sharing the fold's reload lists, not a copy of them (ADR 0061).
        self.sessions.adopt(fold.sessions)
        # The memory store and the skills' usage from the same fold (one
        # pass over the tail feeds them all: docs/adr/0036).
        await trio.to_thread.run_sync(self.memory.store.load, fold.memory.items())
        if self.skills is not None:
            self.skills.usage = fold.usage.copy()
        # On the loop, before the bridge serves: nothing debits meanwhile.
        self._sweep(fold.token_expiries(spent_ids(self.core.kernel)))
        # The fold keeps records sealed: the texts and recorded steps of the
        # turns that may be re-run are read back and opened here.
        found = fold.open.found()
        again = [t for t in found if t.why_resumed() is None]
        blobs = blob_store(self.core.home)
        await trio.to_thread.run_sync(
            reopen_turns, self.memory.sealer, self.core.ledger, again, blobs
        )
        # A re-run's tool calls in flight have their workspace effects undone first.
        rewind = Rewind(self.core, self.plugins, self.tools.workspace)
        plan = [(t, rewind.prepare(t)) for t in found]
        for turn, why in plan:
            if why is not None:
                self._stage(rec.ERROR, _recover.ended_record(turn, why))
        note = _recover.start_note(crashed=crashed, cleaned=list(cleaned), plan=plan)
        if note is not None:
            await self._note(note)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            # At most all executors but one re-run old turns: a new message
            # finds one free (fair between recovery and new work).
            limit = trio.CapacityLimiter(max(1, self.config.executors - 1))
            for turn, why in plan:
                if why is None:
                    self._resume(turn, limit)
            nursery.start_soon(self._follow_cap)
            task_status.started(self)
            await trio.sleep_forever()

    def new_fold(self) -> StartFold:
        """An empty start-up fold with this agent's bounds."""
        return StartFold(keys_kept=self.config.keys_kept, entries_kept=rec.KEPT_ENTRIES)

    async def _follow_cap(self) -> None:
        """Apply a changed ``lanes.max_concurrent`` to waiting turns at
        once: a setting change (or a rollback of one) is a durable record."""
        while True:
            size = self.core.ledger.size
            await self.core.wait_past(size)
            if self.core.ledger.size <= size:
                return  # the core stops
            self._cap.refresh()

    def forgotten(self) -> None:
        """A subject was forgotten: the texts held in memory go (each
        session's history reads back from the ledger, opened anew, the
        summaries are made again), so its words read as forgotten at once."""
        self.sessions.drop_details()
        self._jobs.forget_summaries()
        if self.skills is not None:  # its skills' files written out for scripts
            self.skills.forgotten()

    def _constitution_now(self) -> str:
        # Read at each turn: ``constitution`` is set after construction (serve).
        return self.constitution()

    @property
    def cap(self) -> Cap:
        """The global cap on executing turns (its figures for status and tests)."""
        return self._cap

    def recover(self) -> None:
        """Let the re-runs of the turns the last stop left open go: called
        once the plugins and the executors were started (their tools and a
        worker are what a re-run needs; until then a resend joins it)."""
        self._recovering.set()

    def _resume(self, turn: _recover.OpenTurn, limit: trio.CapacityLimiter) -> None:
        """Re-run an open turn: joined at once by a resend of its key."""
        assert self._nursery is not None
        try:
            trust = TrustLevel.parse(turn.trust)
        except UnknownTrustLevel:
            trust = TrustLevel.UNTRUSTED
        running = Running(
            turn_id=turn.turn_id,
            session=turn.session,
            key=turn.key,
            peer=turn.peer,
            trust=trust,
            risk=Risk(min(turn.risk, self.config.policy[trust].risk_ceiling)),
        )
        running.message_seq = turn.message_seq
        # Its message is durable and may have been acknowledged: whatever
        # happens from here ends it with a recorded reply or error.
        running.accepted = True
        accepted = tpb.TurnAccepted(message_seq=running.message_seq, turn_id=running.id)
        running.emit(tpb.TurnEvent(accepted=accepted))
        running.steering = list(turn.steering)
        running.images = list(turn.images)
        # It goes on from its recorded steps (docs/adr/0042-recover13b-resume.md).
        running.resume = list(turn.replay)
        running.stored = {c: Stored(d, n) for c, (d, n) in turn.stored.items()}
        self.running[running.id] = running
        # Its lane, rebuilt in message order.
        waiting = self._admission.arrive(running, turn.mode, turn.text)

        async def rerun() -> None:
            await self._recovering.wait()
            if waiting is not None:
                await self._lanes.wait(waiting)  # before a recovery slot: no deadlock
                if waiting.leader is not None:  # merged: it only waits for its leader
                    await self._run(running, turn.text, resumed=True, waiting=waiting)
                    return
            async with limit:
                await self.session(running.session)  # its history, read back if dropped
                await self._run(running, turn.text, resumed=True, waiting=waiting)

        self._nursery.start_soon(rerun)

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
        busy = self._admission.current(req.session)
        if busy is not None:
            if busy.key == req.idempotency_key:
                return TurnCursor(busy)
            queued = self._lanes.by_key(req.session, req.idempotency_key)
            if queued is not None:
                return TurnCursor(queued)
            if req.mode not in QUEUED_MODES:
                raise TurnConflict(
                    f"session {req.session} already runs turn {busy.id}; wait for it, queue "
                    "behind it (mode), or steer or abort it",
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
            risk=Risk(self.config.policy[trust].risk_ceiling),
        )
        _images.check(req.images)  # before anything is recorded: a clear refusal
        running.images = list(req.images)
        if req.HasField("risk_ceiling"):  # a caller may only lower it (a job's ceiling)
            running.risk = Risk(min(int(running.risk), req.risk_ceiling))
        # How long the channel held it before this request (its deadline
        # counts from the channel's acceptance), at most the whole timeout.
        running.waited_s = min(req.waited_ms / 1000, self.config.turn_timeout_s)
        self.running[running.id] = running
        # Busy: recorded now, run after: the lane lives in the core, the
        # queue itself in the ledger (docs/adr/0013-lanes-home.md).
        waiting = self._admission.arrive(running, req.mode, req.text)
        if busy is not None and req.mode == tpb.QUEUE_MODE_INTERRUPT:
            busy.aborted = True
            busy.scope.cancel()
            running.interrupts = busy
        self._nursery.start_soon(functools.partial(self._run, running, req.text, waiting=waiting))
        return TurnCursor(running)

    async def session(self, name: str) -> rec.Session:
        """The session ``name`` with its history and keys in memory (read
        back from the ledger, on a worker thread, if they were dropped)."""
        return await read_back(self.sessions, self.core.ledger, name)

    async def previewed(self, shown: list[rec.Session]) -> list[rec.Session]:
        """``shown`` with their previews, read back where not known (after
        a restart: the start-up fold has none)."""
        return await with_previews(self.sessions, self.core.ledger, shown)

    # --- running it --------------------------------------------------------------------

    async def _run(
        self,
        running: Running,
        text: str,
        *,
        resumed: bool = False,
        waiting: Waiting | None = None,
    ) -> None:
        outcome = apb.ExecutorOutcome()
        cut = TurnCut()
        token: Token | None = None
        try:
            with running.scope:
                tools = offered_to(
                    self.core, self.plugins, running, self.config.policy[running.trust]
                )
                token = self._turn_token(running, tools)
                with cut.watching(self._serving(), running, self._standing(running, token)):
                    if resumed:
                        await self._accept_again(running, token)
                        if self.skill_use is not None:  # its viewed folders, written again
                            await self.skill_use.resumed(running)
                    else:
                        await self._accept(running, text, token, waiting)
                    if waiting is None:
                        outcome = await self._admitted(running, text, tools, token)
                    else:
                        outcome = await self._when_its_turn(running, waiting, tools)
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
            outcome.error_message = cut.reason or "the turn was aborted"
            # Kept in the ledger's turn.error, so the reader finds after a
            # reload what was on the screen when they stopped it.
            outcome.text = outcome.text or running.streamed()
        elif not outcome.error_kind and not outcome.text:
            # An empty final is never an answer: the sender is told, and
            # that it was the model's (the kind says whose failure it is).
            outcome.error_kind = tpb.TURN_ERROR_KIND_MODEL
            outcome.error_message = (
                "the model answered with no text: the turn ended without an answer; "
                "ask again, or more plainly"
            )
        if waiting is not None:
            waiting.end_collected(outcome)
        try:
            await self._finish(running, outcome)
            if self.skill_use is not None:  # the review and skill.turn record
                policy = self.config.policy[running.trust]
                await self.skill_use.after(
                    running,
                    outcome,
                    policy=policy,
                    call=self._calls.traced_call,
                    authority=self.authority,
                    token=token,
                )
            if resumed and running.accepted:
                note = _recover.end_note(
                    running.id, running.session, running.end_seq, outcome.error_message
                )
                await self._note(note)
        finally:
            running.end()
            self.running.pop(running.id, None)
            # Nothing spends under its token again: a refund to it by a
            # rollback raises nothing (INV-6, naga_core.authz.EndedTokens).
            self.ended.end(running.token_id)
            # Its session's next goes (or, ended while still queued, it
            # leaves its lane: aborted, a stop).
            self._admission.leave(running)

    def _turn_token(self, running: Running, tools: list[ToolSpec]) -> Token:
        """The turn's executor token, from its trust's row of the trust
        table: its role, its peer as the principal (violations are the
        peer's; a fall of the peer's trust ends the turn), session, the
        tools the row shows, the row's budget, a life a minute past the
        turn's timeout."""
        ttl_ns = int(self.config.turn_timeout_s * 1e9) + 60_000_000_000
        token = self.authority.mint(
            EXECUTOR_ROLE,
            trust=running.trust,
            risk=running.risk,
            session=running.session,
            principal=running.peer or None,
            tools=sorted(
                [t.name for t in tools]
                + memory_tool_names(running.trust)
                + self.core_tools.names(running)
            ),
            budget=self.config.policy[running.trust].turn_budget,
            ttl_ns=ttl_ns,
        )
        running.token_id = token.id
        # Read after the mint, so never before the token's own expiry.
        running.token_expires_ns = self.clock() + ttl_ns
        return token

    def _serving(self) -> trio.Nursery:
        if self._nursery is None:
            raise AgentUnavailable("the agent is not running")
        return self._nursery

    def _standing(self, running: Running, token: Token) -> Standing:
        """The turn token's standing, settled now: at the trust the trust
        table gives its peer (capped by the token's ceiling)."""
        authority = self.authority
        grant = authority.verify(
            token.to_bytes(), authority.request(EXECUTOR_ROLE, session=running.session)
        )
        return self._standing_of(grant)

    async def _when_its_turn(
        self, running: Running, waiting: Waiting, tools: list[ToolSpec]
    ) -> apb.ExecutorOutcome:
        """A queued turn: wait in the lane, then run (with the collect
        messages merged into it), or end with the outcome of the collect
        turn it was merged into."""
        await self._lanes.wait(waiting)
        if waiting.leader is not None:
            await waiting.ended.wait()
            assert waiting.outcome is not None
            out = apb.ExecutorOutcome()
            out.CopyFrom(waiting.outcome)
            return out
        merged = [w.running.id for w in waiting.collected]
        return await self._admitted(
            running, "\n\n".join(waiting.texts), tools, None, also=frozenset(merged)
        )

    async def _admitted(
        self,
        running: Running,
        text: str,
        tools: list[ToolSpec],
        token: Token | None,
        *,
        also: frozenset[str] = frozenset(),
    ) -> apb.ExecutorOutcome:
        """Execute once the global cap has a slot; the turn's deadline runs
        from then (less what the channel held it before the core had it)."""
        async with self._cap.slot() as waited:
            if token is None or waited:
                # A fresh token: the first may have aged in the queue.
                token = self._turn_token(running, tools)
                fresh = token
                self.core.write(
                    lambda: stage_minted(
                        self.core.ledger, fresh, by=f"core: turn {running.id} admitted"
                    )
                )
            running.deadline = trio.current_time() + self.config.turn_timeout_s - running.waited_s
            if running.left_s() <= RECORD_MARGIN_S:
                return apb.ExecutorOutcome(
                    error_kind=tpb.TURN_ERROR_KIND_INTERNAL,
                    error_message=f"the turn's deadline ({self.config.turn_timeout_s:g} s from "
                    f"its channel's acceptance) passed before it could run: the channel held "
                    f"it {running.waited_s:g} s",
                )
            return await self._jobs.execute(running, text, token, tools, also=also)

    async def _accept(
        self, running: Running, text: str, token: Token, waiting: Waiting | None = None
    ) -> None:
        body = apb.TurnRecord(
            session=running.session,
            turn_id=running.id,
            peer=running.peer,
            idempotency_key=running.key,
            text=text,
            trust=running.trust.label,
            risk_ceiling=int(running.risk),
            queue_mode=waiting.mode if waiting is not None else 0,
            images=running.images,
        )
        # Its images are blob references of the record (kept while it is).
        seq = self._stage(rec.MESSAGE, body, tuple(i.blob for i in running.images))
        # The turn token's mint rides the message's group commit: no sync of
        # its own on the turn path (bench/turn.py).
        self.core.write(
            lambda: stage_minted(self.core.ledger, token, by=f"core: turn {running.id}")
        )
        if running.interrupts is not None:
            # The aborted turn's end is durable before this is acknowledged:
            # a kill after the ack cannot bring it back (a start re-runs a
            # turn with no end), so an acknowledged interrupt did stop it.
            await running.interrupts.wait_ended()
        await self._settle()
        running.message_seq = seq
        running.accepted = True
        accepted = tpb.TurnAccepted(message_seq=seq, turn_id=running.id)
        if waiting is not None and not waiting.go.is_set():
            accepted.queued, accepted.position = True, waiting.position
        elif waiting is None and self._cap.full:
            # Its session is free, the global cap is not: it waits for a slot.
            accepted.queued, accepted.position = True, self._cap.waiting + 1
        running.emit(tpb.TurnEvent(accepted=accepted))

    async def _accept_again(self, running: Running, token: Token) -> None:
        """A re-run's start: its ``turn.resumed`` record and token, durable
        before anything runs (a second crash then sees it was re-run)."""
        body = apb.TurnRecord(
            session=running.session,
            turn_id=running.id,
            message_seq=running.message_seq,
            text="re-run by the start after the core stopped",
        )
        self._stage(_recover.RESUMED, body)
        self.core.write(
            lambda: stage_minted(self.core.ledger, token, by=f"core: turn {running.id} re-run")
        )
        await self._settle()

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
        seq = running.end_seq = self._stage(kind, body)
        if not out.error_kind:  # sent: a rollback lists it, never unsends it
            self.core.write(lambda: journal_reply(self.core.kernel, running, seq))
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
            self.ended.end(token_id)  # its executor died with the last core
            gone += self._expiring.push(expires_ns, token_id, now)
        self._forget(gone, "their turns ended before the core started")

    def _forget(self, gone: list[bytes], why: str) -> None:
        if gone:
            # Their entries go: no rollback can refund them any more, and
            # the set stays as small as the queue of expiring tokens.
            self.ended.forget(gone)
            account = BudgetAccount(self.core.kernel)
            self.core.write(lambda: account.forget(gone, why=why))

    @property
    def expiring(self) -> int:
        """Tokens of ended turns not yet expired (their spending still kept)."""
        return len(self._expiring)

    def _stage(self, kind: str, body: apb.TurnRecord, blobs: tuple[bytes, ...] = ()) -> int:
        # Sealed under its subject's key as it is written (the ledger holds
        # no plaintext of it); the sessions in memory note the text.
        subject = record_subject(self.running.get(body.turn_id), body)
        sealed = self.memory.sealer.seal_turn(kind, subject, body)
        seq = self.core.write(lambda: rec.stage(self.core.ledger, kind, sealed, blobs))
        self.sessions.note(kind, body, seq, rec.now_ns())
        return seq

    async def note_session(self, session: str, text: str) -> int:
        """A durable note of the core's in ``session`` (a ``turn.note``
        record, unsealed: the core's words, not a subject's); its seq."""
        seq = self._stage(rec.NOTE, apb.TurnRecord(session=session, text=text))
        await self._settle()
        return seq

    async def _note(self, text: str) -> None:
        """A durable entry in the kernel's history (``naga history``)."""
        self.core.write(lambda: self.core.kernel.perform([], None, description=text))
        await self._settle()

    async def _settle(self) -> None:
        if await trio.to_thread.run_sync(self.core.settle):
            self.core.notify_appended()

    # --- steering and aborting -----------------------------------------------------------

    def session_turn(self, session: str) -> Running:
        running = self._admission.current(session)
        if running is None:
            if self.sessions.get(session) is None:
                raise SessionNotFound(f"no session {session!r}")
            raise NoTurnRunning(f"session {session} runs no turn")
        return running

    async def steer(self, req: tpb.SteerTurnRequest) -> int:
        """Steer the session's running turn; the steering message's seq. A
        key the session's window knows is not steered again (a client
        resending after a reconnect): its recorded seq, whichever turn now
        runs. The session is read back first, so the window is whole. A
        turn that has its last answer (or was aborted) takes no steer: it
        would reach no model call (NoTurnRunning: the next message)."""
        if self.sessions.get(req.session) is not None:
            known = (await self.session(req.session)).keys.get(req.idempotency_key)
            if known is not None:
                return known.message_seq
        running = self.session_turn(req.session)
        if running.steering_closed or running.aborted:
            # Its last answer is in: recorded into it, the steer would reach
            # no model call. Refused, it is the next message (the gateway
            # runs it as a followup; docs/adr/0059).
            raise NoTurnRunning(
                f"session {req.session}'s turn takes no more steering (its last answer is in, "
                "or it was aborted): send it as a message"
            )
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

    async def call_step(self, p: Caller, req: apb.ToolStepRequest) -> apb.ToolStepResponse:
        return await self._calls.call_step(p, req)


def _error(out: apb.ExecutorOutcome) -> tpb.TurnError:
    return tpb.TurnError(
        kind=tpb.TurnErrorKind.ValueType(out.error_kind or tpb.TURN_ERROR_KIND_INTERNAL),
        message=out.error_message,
        partial_text=out.text,
    )


__all__ = ["EXECUTOR_WAIT_S", "SESSION", "Agent", "Caller", "Core"]
