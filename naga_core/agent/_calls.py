"""The executor's calls into the core during a turn: model completions
(through the provider worker, text streamed as deltas, each traced with its
request and response as blobs and debited from the turn's budget) and tool
calls (checked against the turn token, traced, shown as events)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import TypeVar

import trio
from google.protobuf.message import DecodeError, Message

from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core._store import blob_store
from naga_core.agent import _sessions as rec
from naga_core.agent._core import Caller, Core, authority_of
from naga_core.agent._errors import AgentError, TurnConflict
from naga_core.agent._tools import refusal_of
from naga_core.agent._turn import Running
from naga_core.agent._workers import AgentWorkers
from naga_core.authz import BudgetAccount, Grant
from naga_core.plugins import PluginError, PluginHost

M = TypeVar("M", bound=Message)

#: Stages one trace record of a turn (and indexes it); its seq.
Stage = Callable[[str, apb.TurnRecord, tuple[bytes, ...]], int]


def b64(msg: Message) -> str:
    return base64.b64encode(msg.SerializeToString()).decode("ascii")


def decode(cls: type[M], result_json: str, field: str) -> M:
    try:
        return cls.FromString(base64.b64decode(json.loads(result_json)[field], validate=True))
    except (ValueError, KeyError, TypeError, DecodeError) as exc:
        raise AgentError(f"an undecodable {cls.__name__} from a worker: {exc}") from None


class ExecutorCalls:
    """ModelService.Complete and ToolService.Call, for the turns in ``running``
    (the agent's own dict: a turn is there from its start to its end)."""

    def __init__(
        self,
        core: Core,
        plugins: PluginHost,
        workers: AgentWorkers,
        running: dict[str, Running],
        stage: Stage,
    ) -> None:
        self._core = core
        self._plugins = plugins
        self._workers = workers
        self._running = running
        self._stage = stage
        self._blobs = blob_store(core.home)

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
        assert grant is not None
        left = authority_of(self._core).remaining(grant)
        if left is not None and left <= 0:
            return apb.ModelCallResponse(
                budget_exhausted=True,
                message=f"the turn's budget of {grant.budget_ceiling} tokens is spent; "
                "the turn stops here (send a new message to go on)",
            )
        request = mpb.ChatRequest()
        request.CopyFrom(req.request)
        for text in running.steering:
            request.messages.append(mpb.ChatMessage(role=mpb.ROLE_USER, content=text))
        raw = request.SerializeToString()
        started = rec.now_ns()
        reply = await self._provider_call(raw, running.delta)
        took_us = (rec.now_ns() - started) // 1000
        failed = reply.HasField("error")
        answer_raw = (reply.error if failed else reply.response).SerializeToString()
        digests = await trio.to_thread.run_sync(
            lambda: (self._blobs.put(raw), self._blobs.put(answer_raw))
        )
        usage = reply.response.usage
        self._stage(
            rec.MODEL,
            apb.TurnRecord(
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
            ),
            digests,
        )
        if failed:
            return apb.ModelCallResponse(error=reply.error)
        spent = usage.prompt_tokens + usage.completion_tokens
        if left is not None:
            spent = min(spent, left)
        if spent:
            account = BudgetAccount(self._core.kernel)
            self._core.write(
                lambda: account.debit(grant, spent, what=f"a model call of turn {running.id}")
            )
        out = apb.ModelCallResponse(response=reply.response)
        if left is None:
            out.unlimited = True
        else:
            out.budget_left = left - spent
        return out

    async def _provider_call(self, raw: bytes, on_text: Callable[[str], None]) -> apb.ProviderReply:
        timeout = self._core.settings.get_real("model.timeout_s")
        encoded = base64.b64encode(raw).decode("ascii")
        try:
            result = await self._workers.complete(encoded, timeout, on_text)
            return decode(apb.ProviderReply, result, "reply")
        except (AgentError, PluginError) as exc:
            return apb.ProviderReply(
                error=mpb.ModelError(
                    kind=mpb.MODEL_ERROR_KIND_UNREACHABLE,
                    message=f"the model provider could not be reached: {exc}",
                    provider=self._workers.provider_name,
                )
            )

    async def call_tool(self, p: Caller, req: apb.ToolCallRequest) -> apb.ToolCallResponse:
        grant = p.grant
        running = self.turn_of(grant, req.session, req.turn_id)
        assert grant is not None
        running.emit(
            tpb.TurnEvent(
                tool_started=tpb.ToolCallStarted(
                    call_id=req.call_id, tool=req.tool, arguments_json=req.arguments_json
                )
            )
        )
        started = rec.now_ns()
        refusal = refusal_of(self._plugins, grant, req.tool)
        if refusal is not None:
            answer = apb.ToolCallResponse(ok=False, error=refusal)
        else:
            plugin = req.tool.split(".", 1)[0]
            try:
                result, _pid = await self._plugins.invoke(
                    plugin, req.tool, req.arguments_json, None
                )
                answer = apb.ToolCallResponse(ok=True, result_json=result)
            except PluginError as exc:
                answer = apb.ToolCallResponse(ok=False, error=f"tool {req.tool} failed: {exc}")
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
                duration_us=(rec.now_ns() - started) // 1000,
            ),
            (),
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
        return answer


__all__ = ["ExecutorCalls", "Stage", "b64", "decode"]
