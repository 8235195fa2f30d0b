"""A turn's executor job (docs/design/executor.md): the prompt built for
it (the constitution, the agent's prompt, recalled memories, the offered
skills, the session's history fitted to the model's window and, when the
window overflows, summarised by one model call of the turn), and the job
sent to an idle executor of the pool, once more to a rebuilt one if its
executor died before the turn reached anything."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from naga.constants import EXECUTOR_TOOL
from naga.plugin import ToolSpec
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import _sessions as rec
from naga_core.agent._calls import RECORD_MARGIN_S, ExecutorCalls
from naga_core.agent._compact import (
    COMPACT,
    COMPACT_MIN,
    COMPACT_MIN_WINDOW,
    Summaries,
    Summary,
)
from naga_core.agent._compact import request_for as compact_request
from naga_core.agent._config import EXECUTOR_ROLE, AgentConfig
from naga_core.agent._core import Core, authority_of
from naga_core.agent._core_tools import CoreTools
from naga_core.agent._memory_tools import RECALL_TOKENS, MemoryTools
from naga_core.agent._memory_tools import offered as memory_tools
from naga_core.agent._prompt import Budget, Fitted
from naga_core.agent._prompt import build as build_prompt
from naga_core.agent._results import READ_RESULT_SPEC
from naga_core.agent._skill_use import SkillUse
from naga_core.agent._tools import spec_for_model
from naga_core.agent._turn import Running
from naga_core.agent._workers import AgentWorkers
from naga_core.authz import Token, stage_minted
from naga_core.constitution import prompt_section
from naga_core.plugins import TypedCall, WorkerUnavailable
from naga_core.skills import VIEW_SPEC

log = logging.getLogger("naga.agent")

#: How long a turn waits for a free executor before it fails.
EXECUTOR_WAIT_S = 30.0
#: Mints a turn's executor token (the agent's, from the trust table's row).
Mint = Callable[[Running, list[ToolSpec]], Token]


class Jobs:
    """Builds and runs turns' executor jobs (on the core's loop)."""

    def __init__(
        self,
        core: Core,
        config: AgentConfig,
        workers: AgentWorkers,
        sessions: rec.Sessions,
        calls: ExecutorCalls,
        *,
        memory: MemoryTools,
        skill_use: SkillUse | None,
        core_tools: CoreTools,
        constitution: Callable[[], str],
        mint: Mint,
    ) -> None:
        self._core = core
        self._config = config
        self._workers = workers
        self._sessions = sessions
        self._calls = calls
        self._memory = memory
        self._skill_use = skill_use
        self._core_tools = core_tools
        self._constitution = constitution
        self._mint = mint
        #: Each session's summary of its compacted history (in memory only).
        self.summaries = Summaries(config.sessions_kept)

    def forget_summaries(self) -> None:
        """Summaries are made again (a subject was forgotten: its words go)."""
        self.summaries = Summaries(self._config.sessions_kept)

    async def execute(
        self,
        running: Running,
        text: str,
        token: Token,
        tools: list[ToolSpec],
        *,
        also: frozenset[str] = frozenset(),
    ) -> apb.ExecutorOutcome:
        session = self._sessions.open(running.session)
        specs = [
            *(spec_for_model(t) for t in tools),
            *memory_tools(running.trust),
            *self._core_tools.offered(running),
        ]
        offer = self._skill_use.offer(running, text) if self._skill_use is not None else None
        if offer is not None and offer.skills:  # progressive disclosure: bodies on demand
            specs.append(VIEW_SPEC)
        # turn.read_result is offered only once a result was stored (calls.py);
        # its room is kept from the start.
        budget = Budget.of(
            self._workers.context_window(), self._config.max_tokens, [*specs, READ_RESULT_SPEC]
        )
        # History holds this turn's message already (indexed when staged),
        # not always last (a queued or re-run turn): it is left out by id,
        # with the collect messages merged into it (``also``).
        own = {running.id, *also}
        entries = [e for e in session.entries if e.turn_id not in own]
        summary = self.summaries.get(running.session)
        recalled = self._memory.recall(running, text, min(RECALL_TOKENS, budget.window // 8))
        skills = offer.section() if offer is not None else ""
        fitted = self._fit(
            budget, entries, text, summary, recalled.section, skills=skills, images=running.images
        )
        fresh = set(fitted.dropped_seqs)
        # Only what the window cannot hold is summarised: agent.history_entries
        # is the owner's choice of how much history to send at all.
        if (
            self._config.compact_history
            and budget.window >= COMPACT_MIN_WINDOW
            and fitted.by_window >= COMPACT_MIN
        ):
            # The older half of what is kept goes into the summary too, so
            # the next summary call is half a window of history away, not
            # one turn.
            upto = summary.upto_seq if summary is not None else 0
            kept = [e for e in entries if e.seq > upto and e.seq not in fresh]
            more = {e.seq for e in kept[: len(kept) // 2]}
            compacted = await self._compact(
                running, token, budget, summary, [e for e in entries if e.seq in fresh | more]
            )
            if isinstance(compacted, Summary):
                fitted = self._fit(
                    budget,
                    entries,
                    text,
                    compacted,
                    recalled.section,
                    skills=skills,
                    images=running.images,
                )
            else:
                fitted.left_out.append(compacted)
        running.budget = budget
        running.history = (1, len(fitted.messages) - 1)
        running.omitted = fitted.left_out
        running.dropped_seqs = fitted.dropped_seqs
        job = apb.ExecutorJob(
            session=running.session,
            turn_id=running.id,
            token=token.to_bytes(),
            core_socket=self._core.socket,
            messages=[*fitted.messages, *running.resume],
            tools=specs,
            max_steps=self._core.settings.get_int("agent.max_steps"),
            max_tokens=self._config.max_tokens,
        )
        for again in (False, True):
            worker = await self._workers.take_executor(
                max(0.0, min(EXECUTOR_WAIT_S, running.left_s()))
            )
            try:
                # The executor's share: the turn's time left less the time
                # to record its outcome.
                result = await worker.call_typed(
                    EXECUTOR_TOOL,
                    TypedCall("executor_job", job, "executor_outcome"),
                    max(0.001, running.left_s() - RECORD_MARGIN_S / 2),
                )
            except WorkerUnavailable:
                if running.called or again:
                    raise  # it reached the model or a tool: not run twice
                # Its executor died before the turn reached anything (one
                # that died idle, not yet seen by its supervisor): nothing
                # happened, so the job goes to the rebuilt one, under a
                # fresh token (a late call of the dead one is refused).
                log.info("turn %s: its executor ended before any call; again", running.id)
                token = self._mint(running, tools)
                self._core.write(
                    functools.partial(
                        stage_minted, self._core.ledger, token, by=f"core: turn {running.id}"
                    )
                )
                job.token = token.to_bytes()
                continue
            finally:
                self._workers.give_back(worker)
            return result.executor_outcome
        raise AssertionError("the second attempt returns or raises")

    def _fit(
        self,
        budget: Budget,
        entries: list[tpb.SessionEntry],
        text: str,
        summary: Summary | None,
        memory: str = "",
        *,
        skills: str = "",
        images: list[mpb.ImagePart] | None = None,
    ) -> Fitted:
        """The job's prompt; entries a summary covers are left to it;
        ``memory``: the recalled items' section (naga_core.agent._memory_tools);
        ``skills``: the offered skills' names and descriptions."""
        # The constitution first: after it the agent's own prompt, and the
        # tool specs the model's chat template appends. Placed last, right
        # before the specs, it made the embedded model echo the specs as
        # text instead of calling a tool.
        rules = prompt_section(self._constitution()).strip()
        system = (rules + "\n\n" if rules else "") + self._config.system_prompt + memory + skills
        if summary is not None:
            entries = [e for e in entries if e.seq > summary.upto_seq]
            system += summary.system_note()
        fitted = build_prompt(
            budget,
            system,
            entries,
            text,
            history_limit=self._config.history_entries,
            images=images or (),
        )
        if summary is not None:
            fitted.left_out.append(
                f"{len(summary.covers)} earlier messages (seqs {summary.covers[0]}.."
                f"{summary.upto_seq}), in the summary the prompt carries instead"
            )
        return fitted

    async def _compact(
        self,
        running: Running,
        token: Token,
        budget: Budget,
        previous: Summary | None,
        entries: list[tpb.SessionEntry],
    ) -> Summary | str:
        """One model call summarising ``previous`` and ``entries``, recorded
        as a turn.compact record and debited from the turn's budget; the new
        summary, or why there is none (the entries are then only dropped)."""
        authority = authority_of(self._core)
        grant = authority.verify(
            token.to_bytes(), authority.request(EXECUTOR_ROLE, session=running.session)
        )
        left = authority.remaining(grant)
        if left is not None and left <= 0:
            return "no summary of them: the turn's budget is spent"
        covers = (*(previous.covers if previous else ()), *(e.seq for e in entries))
        request = compact_request(budget, previous, entries)
        # One record: the call (blobs, tokens) with the summary as its text
        # and the seqs it covers. Not a turn.model record: replay feeds those
        # to the executor's calls, and this call is the core's own.
        reply, _spent = await self._calls.traced_call(
            running,
            grant,
            left,
            request,
            kind=COMPACT,
            trace=apb.TurnRecord(dropped_seqs=covers),
            with_text=True,
        )
        summary_text = reply.response.message.content.strip()
        if reply.HasField("error") or not summary_text:
            why = reply.error.message if reply.HasField("error") else "an empty answer"
            return f"no summary of them: the summary call failed ({why})"
        summary = Summary(max(covers), summary_text, covers)
        self.summaries.put(running.session, summary)
        return summary


__all__ = ["EXECUTOR_WAIT_S", "Jobs"]
