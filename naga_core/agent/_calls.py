"""The executor's calls into the core during a turn: model completions
(through the provider worker, text streamed as deltas, each traced with its
request and response as blobs and debited from the turn's budget) and tool
calls (checked against the turn token, traced, shown as events)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import trio

from naga.plugin import ToolSpec
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core._store import blob_store
from naga_core.agent import _images
from naga_core.agent import _sessions as rec
from naga_core.agent._core import Caller, Core, authority_of
from naga_core.agent._core_tools import CoreTools, TurnView
from naga_core.agent._errors import AgentError, NoModelProvider, TurnConflict
from naga_core.agent._memory_tools import TOOLS as MEMORY_TOOLS
from naga_core.agent._memory_tools import WRITE_TOOL as MEMORY_WRITE
from naga_core.agent._memory_tools import MemoryTools
from naga_core.agent._memory_tools import subject as memory_subject
from naga_core.agent._prompt import fit_request
from naga_core.agent._recover import TOOL_CALL
from naga_core.agent._results import (
    READ_RESULT_SPEC,
    READ_RESULT_TOOL,
    Stored,
    read_arguments,
    read_piece,
    shown,
)
from naga_core.agent._skill_use import SkillUse
from naga_core.agent._tool_calls import ToolCalls
from naga_core.agent._tools import all_tools, refusal_of
from naga_core.agent._turn import Running
from naga_core.agent._workers import AgentWorkers
from naga_core.authz import BudgetAccount, Grant
from naga_core.errors import BlobError
from naga_core.plugins import CallTimedOut, PluginError, PluginHost
from naga_core.skills import VIEW_TOOL

#: Kept from the turn's deadline for recording a call's answer and the
#: turn's end after it.
RECORD_MARGIN_S = 2.0

#: Most independent reads of one model step that run at once.
STEP_READS_AT_ONCE = 4

#: Stages one trace record of a turn (and indexes it); its seq.
Stage = Callable[[str, apb.TurnRecord, tuple[bytes, ...]], int]


class ExecutorCalls:
    """ModelService.Complete and ToolService.Call and CallStep, for the turns in ``running``
    (the agent's own dict: a turn is there from its start to its end)."""

    def __init__(
        self,
        core: Core,
        plugins: PluginHost,
        workers: AgentWorkers,
        running: dict[str, Running],
        stage: Stage,
        *,
        tools: ToolCalls,
        settle: Callable[[], Awaitable[None]],
        memory: MemoryTools,
        skills: SkillUse | None = None,
        core_tools: CoreTools | None = None,
    ) -> None:
        self.tools = tools
        self.memory = memory
        self.skills = skills
        self._core = core
        self._plugins = plugins
        self._workers = workers
        self._running = running
        self._stage = stage
        self._settle = settle
        self._blobs = blob_store(core.home)
        self.core_tools = core_tools or CoreTools()

    def turn_of(self, grant: Grant | None, session: str, turn_id: str) -> Running:
        """The running turn a call names, if the caller's token is that turn's."""
        running = self._running.get(turn_id)
        if (
            running is None
            or grant is None
            or running.session != session
            or running.token_id != grant.token_id
        ):
            raise TurnConflict(
                f"turn {turn_id} of session {session} is not running under this token",
            )
        return running

    async def complete(self, p: Caller, req: apb.ModelCallRequest) -> apb.ModelCallResponse:
        grant = p.grant
        running = self.turn_of(grant, req.session, req.turn_id)
        running.called = True
        assert grant is not None
        left = authority_of(self._core).remaining(grant)
        if left is not None and left <= 0:
            running.steering_closed = True  # the turn ends with this answer
            return apb.ModelCallResponse(
                budget_exhausted=True,
                message=f"the turn's budget of {grant.budget_ceiling} tokens is spent; "
                "the turn stops here (send a new message to go on)",
            )
        request = mpb.ChatRequest()
        request.CopyFrom(req.request)
        seen = len(running.steering)
        for text in running.steering:
            request.messages.append(mpb.ChatMessage(role=mpb.ROLE_USER, content=text))
        if running.stored:  # a result was too long to show: the model may read on
            request.tools.append(READ_RESULT_SPEC)
        left_out = [*running.omitted, *fit_request(running.budget, request, running.history)]
        trace = apb.TurnRecord(left_out=left_out, dropped_seqs=running.dropped_seqs)
        reply, spent = await self.traced_call(
            running, grant, left, request, kind=rec.MODEL, trace=trace, on_text=running.delta
        )
        if reply.HasField("error"):
            running.steering_closed = True  # the executor ends the turn on it
            return apb.ModelCallResponse(error=reply.error)
        out = apb.ModelCallResponse(response=reply.response)
        if not reply.response.message.tool_calls:
            # The executor's last call, unless steering came while it ran
            # (no await since the check: a steer lands before or after it).
            if len(running.steering) > seen:
                out.steering_pending = True
                if running.streamed():
                    running.delta("\n\n")  # the next answer streams as a paragraph of its own
            else:
                running.steering_closed = True
        if left is None:
            out.unlimited = True
        else:
            out.budget_left = left - spent
        return out

    def _with_images(self, running: Running, request: mpb.ChatRequest) -> mpb.ChatRequest:
        """The request as the provider gets it: the turn's images filled in
        for a vision provider, placeholders for any other (the trace keeps
        the references only: no image bytes in another blob)."""
        return _images.for_provider(
            request,
            vision=self._workers.vision(),
            own=running.images,
            subject=memory_subject(running),
            sealer=self.memory.sealer,
            read=self._blobs.get,
        )

    async def traced_call(
        self,
        running: Running,
        grant: Grant,
        left: int | None,
        request: mpb.ChatRequest,
        *,
        kind: str,
        trace: apb.TurnRecord,
        on_text: Callable[[str], None] | None = None,
        with_text: bool = False,
    ) -> tuple[apb.ProviderReply, int]:
        """One model call of ``running``'s turn: sent to the provider within
        the turn's share, traced as a ``kind`` record (``trace``'s fields
        plus the call's: blobs, times, tokens, provider), its tokens debited
        from ``grant`` (at most ``left``); ``with_text``: the reply's text is
        the record's ``text``. The reply and what was debited."""
        # Sealed under the turn's subject: the request carries its history
        # and recalled memories (docs/adr/0037).
        who, sealer = memory_subject(running), self.memory.sealer
        raw = sealer.seal_blob(who, request.SerializeToString())
        stored: list[bytes] = []
        failed_put: list[Exception] = []

        def put_request() -> None:
            # Raised below, as before, not from inside the nursery (which
            # would wrap it in an exception group).
            try:
                stored.append(self._blobs.put(raw))
            except BlobError as exc:
                failed_put.append(exc)

        started = rec.now_ns()
        async with trio.open_nursery() as nursery:
            # The request's blob is made durable while the model answers:
            # its syncs (file, fan-out directory) are off the turn's path.
            nursery.start_soon(partial(trio.to_thread.run_sync, put_request))
            # Off the loop only when there are images to read and check (no
            # thread hop on every model call).
            sent = (
                await trio.to_thread.run_sync(self._with_images, running, request)
                if any(m.images for m in request.messages)
                else request
            )
            reply = await self._provider_call(sent, running, on_text)
            took_us = (rec.now_ns() - started) // 1000
        if failed_put:
            raise failed_put[0]
        failed = reply.HasField("error")
        answer_raw = (reply.error if failed else reply.response).SerializeToString()
        sealed_answer = sealer.seal_blob(who, answer_raw)
        # Stored while the answer goes back to the executor: the commit
        # that makes its record durable waits for the blob first (a record
        # never names a blob that is not on disk), so its syncs (file,
        # fan-out directory) are off the turn's path.
        answer_digest, answer_put = self._blobs.put_soon(sealed_answer)
        self._core.ledger.commit_after(answer_put)
        digests = (stored[0], answer_digest)
        usage = reply.response.usage
        body = apb.TurnRecord(
            session=running.session,
            turn_id=running.id,
            request_blob=digests[0],
            response_blob=digests[1],
            started_ns=started,
            duration_us=took_us,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            provider=reply.error.provider if failed else reply.response.provider,
            failed=failed,
        )
        body.MergeFrom(trace)
        if with_text:
            body.text = reply.response.message.content.strip()
        self._stage(kind, body, digests)
        if failed:
            return reply, 0
        spent = usage.prompt_tokens + usage.completion_tokens
        if left is not None:
            spent = min(spent, left)
        if spent:
            account = BudgetAccount(self._core.kernel)
            self._core.write(
                lambda: account.debit(grant, spent, what=f"a model call of turn {running.id}")
            )
        return reply, spent

    async def _provider_call(
        self, request: mpb.ChatRequest, running: Running, on_text: Callable[[str], None] | None
    ) -> apb.ProviderReply:
        # This call's share of the turn: model.timeout_s, or what the turn
        # has left less the time to record the answer, whichever is less.
        ceiling = self._core.settings.get_real("model.timeout_s")
        timeout = min(ceiling, running.left_s() - RECORD_MARGIN_S)
        if timeout <= 0:
            return apb.ProviderReply(
                error=mpb.ModelError(
                    kind=mpb.MODEL_ERROR_KIND_TIMEOUT,
                    message="the turn's deadline has passed; no model call was made",
                    provider=self._workers.provider_name,
                )
            )
        try:
            return await self._workers.complete(request, timeout, on_text)
        except NoModelProvider as exc:
            # Nothing was asked: the choice itself failed (a refused
            # providers.json, a setting naming no provider). Say so, not
            # "could not be reached".
            return apb.ProviderReply(
                error=mpb.ModelError(
                    kind=mpb.MODEL_ERROR_KIND_UNREACHABLE,
                    message=f"no model provider to call: {exc}",
                    provider=self._workers.provider_name,
                )
            )
        except (AgentError, PluginError) as exc:
            kind = (
                mpb.MODEL_ERROR_KIND_TIMEOUT
                if isinstance(exc, CallTimedOut)
                else mpb.MODEL_ERROR_KIND_UNREACHABLE
            )
            return apb.ProviderReply(
                error=mpb.ModelError(
                    kind=kind,
                    message=f"the model provider could not be reached: {exc}",
                    provider=self._workers.provider_name,
                )
            )

    async def _invoke(
        self, running: Running, req: apb.ToolCallRequest
    ) -> tuple[apb.ToolCallResponse, Stored | None]:
        """Run the tool; a result above what the model is shown is stored
        whole as a blob and the model shown its head (docs/adr/0010)."""
        try:
            # Approval, the call, its effect: naga_core.agent._tool_calls.
            spec = all_tools(self._plugins)[req.tool]
            done = await self.tools.call(running, spec, req.arguments_json, req.call_id)
        except PluginError as exc:
            return apb.ToolCallResponse(ok=False, error=f"tool {req.tool} failed: {exc}"), None
        if not done.ok:
            return apb.ToolCallResponse(ok=False, error=done.error), None
        result = done.result_json
        raw = result.encode()
        size = running.budget.shown_bytes
        if len(raw) <= size:
            return apb.ToolCallResponse(ok=True, result_json=result), None
        sealed = self.memory.sealer.seal_blob(memory_subject(running), raw)
        digest = await trio.to_thread.run_sync(self._blobs.put, sealed)
        stored = Stored(digest, len(raw))
        running.stored[req.call_id] = stored
        return apb.ToolCallResponse(ok=True, result_json=shown(req.call_id, raw, size)), stored

    async def _read_result(self, running: Running, arguments_json: str) -> apb.ToolCallResponse:
        parsed = read_arguments(arguments_json)
        if isinstance(parsed, str):
            return apb.ToolCallResponse(ok=False, error=f"{READ_RESULT_TOOL}: {parsed}")
        call_id, offset = parsed
        stored = running.stored.get(call_id)
        if stored is None:
            return apb.ToolCallResponse(
                ok=False,
                error=f"{READ_RESULT_TOOL}: no result of call {call_id!r} in this turn was "
                "stored (only results too long to show are)",
            )
        raw = self.memory.sealer.open_blob(
            await trio.to_thread.run_sync(self._blobs.get, stored.digest)
        )
        if raw is None:
            return apb.ToolCallResponse(
                ok=False, error=f"{READ_RESULT_TOOL}: the result of call {call_id!r} is forgotten"
            )
        piece = read_piece(call_id, raw, offset, running.budget.shown_bytes)
        return apb.ToolCallResponse(ok=True, result_json=piece)

    async def call_tool(self, p: Caller, req: apb.ToolCallRequest) -> apb.ToolCallResponse:
        grant = p.grant
        running = self.turn_of(grant, req.session, req.turn_id)
        assert grant is not None
        started = self._begin(running, req)
        stored: Stored | None = None
        core_tool = self.core_tools.get(req.tool)
        if req.tool == READ_RESULT_TOOL:
            answer = await self._read_result(running, req.arguments_json)
        elif core_tool is not None:
            turn = TurnView.of(running)
            refusal = self.core_tools.why_not(core_tool, turn, grant.tools)
            if refusal is not None:
                answer = apb.ToolCallResponse(ok=False, error=refusal)
            else:
                # Durable before it runs, as a plugin's tool call (no tool twice).
                self._stage(TOOL_CALL, _tool_intent(running, req, started), ())
                await self._settle()
                done = await core_tool.call(turn, req.arguments_json)
                answer = apb.ToolCallResponse(
                    ok=done.ok, result_json=done.result_json, error=done.error
                )
        elif req.tool in MEMORY_TOOLS:  # the core's own, gated by the turn's trust
            if req.tool == MEMORY_WRITE:
                # Durable before it runs, as any tool with an effect: a start
                # after a crash knows the write may have taken effect.
                self._stage(TOOL_CALL, _tool_intent(running, req, started), ())
                await self._settle()
            answer = await self.memory.call(running, req, self._settle)
        elif req.tool == VIEW_TOOL and self.skills is not None:  # the core's own, R0
            answer = await self.skills.view(running, req.arguments_json)
        else:
            refusal = refusal_of(self._plugins, grant, req.tool)
            if refusal is not None:
                answer = apb.ToolCallResponse(ok=False, error=refusal)
            else:
                # Durable before it runs: a crash from here on ends the turn
                # with an error instead of re-running it (no tool twice).
                self._stage(TOOL_CALL, _tool_intent(running, req, started), ())
                await self._settle()
                answer, stored = await self._invoke(running, req)
        self._end(running, req, answer, stored, started=started, ended=rec.now_ns())
        return answer

    async def call_step(self, p: Caller, req: apb.ToolStepRequest) -> apb.ToolStepResponse:
        """The calls of one model step, answered in its order: concurrently
        when every one is an independent read, else one at a time."""
        grant = p.grant
        running = self.turn_of(grant, req.session, req.turn_id)
        assert grant is not None
        calls = list(req.calls)
        specs = all_tools(self._plugins)
        if len(calls) > 1 and all(self._independent_read(grant, specs, c) for c in calls):
            return apb.ToolStepResponse(results=await self._reads(running, calls), concurrent=True)
        return apb.ToolStepResponse(results=[await self.call_tool(p, c) for c in calls])

    def _independent_read(
        self, grant: Grant, specs: dict[str, ToolSpec], req: apb.ToolCallRequest
    ) -> bool:
        # The core's own tools keep their one-at-a-time paths (memory's
        # writes, the skills' and results' readers are cheap anyway).
        if (
            req.tool in (READ_RESULT_TOOL, VIEW_TOOL)
            or req.tool in MEMORY_TOOLS
            or self.core_tools.get(req.tool) is not None
        ):
            return False
        spec = specs.get(req.tool)
        return (
            spec is not None
            and refusal_of(self._plugins, grant, req.tool) is None
            and self.tools.independent_read(spec)
        )

    async def _reads(
        self, running: Running, calls: list[apb.ToolCallRequest]
    ) -> list[apb.ToolCallResponse]:
        """Independent reads of one step, at most STEP_READS_AT_ONCE at a
        time. The ledger gets the same records as calls one at a time would
        make, in an order that does not depend on which finished first: every
        intent in the step's order (durable before any runs), then every
        result in the step's order."""
        started = [self._begin(running, req) for req in calls]
        for req, at in zip(calls, started, strict=True):
            self._stage(TOOL_CALL, _tool_intent(running, req, at), ())
        await self._settle()
        done: list[tuple[apb.ToolCallResponse, Stored | None, int] | None] = [None] * len(calls)
        limiter = trio.CapacityLimiter(STEP_READS_AT_ONCE)

        async def one(i: int) -> None:
            async with limiter:
                answer, stored = await self._invoke(running, calls[i])
            done[i] = (answer, stored, rec.now_ns())

        async with trio.open_nursery() as nursery:
            for i in range(len(calls)):
                nursery.start_soon(one, i)
        out: list[apb.ToolCallResponse] = []
        for req, at, slot in zip(calls, started, done, strict=True):
            assert slot is not None  # the nursery ran every one to its end
            answer, stored, ended = slot
            self._end(running, req, answer, stored, started=at, ended=ended)
            out.append(answer)
        return out

    def _begin(self, running: Running, req: apb.ToolCallRequest) -> int:
        running.called = True
        running.emit(
            tpb.TurnEvent(
                tool_started=tpb.ToolCallStarted(
                    call_id=req.call_id, tool=req.tool, arguments_json=req.arguments_json
                )
            )
        )
        return rec.now_ns()

    def _end(
        self,
        running: Running,
        req: apb.ToolCallRequest,
        answer: apb.ToolCallResponse,
        stored: Stored | None,
        *,
        started: int,
        ended: int,
    ) -> None:
        self._stage(
            rec.TOOL,
            apb.TurnRecord(
                session=running.session,
                turn_id=running.id,
                tool=req.tool,
                call_id=req.call_id,
                arguments_json=req.arguments_json,
                ok=answer.ok,
                result_json=answer.result_json,
                error=answer.error,
                started_ns=started,
                duration_us=(ended - started) // 1000,
                result_blob=stored.digest if stored else b"",
                result_bytes=stored.size if stored else 0,
            ),
            (stored.digest,) if stored else (),
        )
        running.emit(
            tpb.TurnEvent(
                tool_finished=tpb.ToolCallFinished(
                    call_id=req.call_id,
                    ok=answer.ok,
                    result_json=answer.result_json,
                    error=answer.error,
                )
            )
        )


def _tool_intent(running: Running, req: apb.ToolCallRequest, started: int) -> apb.TurnRecord:
    return apb.TurnRecord(
        session=running.session,
        turn_id=running.id,
        tool=req.tool,
        call_id=req.call_id,
        arguments_json=req.arguments_json,
        started_ns=started,
    )


__all__ = ["RECORD_MARGIN_S", "STEP_READS_AT_ONCE", "ExecutorCalls", "Stage"]
