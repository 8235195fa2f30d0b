"""The agent loop of one turn. Each step is one RPC to the core and at most
a few more: everything heavy (the prompt's history, the tool list) arrives
in the job, so the per-turn work here is building requests and reading
answers. The executor keeps one connection to the core for its whole life
(:class:`CoreLink`); each turn presents its own token over it."""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Sequence
from typing import Protocol

from google.protobuf.message import DecodeError

from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga.tokens import Token, TokenError
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_plugins._plugin import Plugin
from naga_plugins.errors import ToolFailed

EXECUTOR_TOOL = "executor.turn"
#: Longest wait for one answer of the core (a model call included).
_CALL_TIMEOUT_S = 600.0


class CoreCalls(Protocol):
    """The two calls a turn makes of the core: a connected naga.sdk Client,
    or a recording's answers (naga_core.replay)."""

    def complete(
        self, request: apb.ModelCallRequest, *, timeout: float | None = None
    ) -> apb.ModelCallResponse: ...

    def call_tool(
        self, request: apb.ToolCallRequest, *, timeout: float | None = None
    ) -> apb.ToolCallResponse: ...


def tool_name(model_name: str) -> str:
    """The tool a model's call names: ToolSpec names write '.' as '__'
    (providers allow letters, digits, '_' and '-' only)."""
    return model_name.replace("__", ".")


def run_turn(job: apb.ExecutorJob, client: CoreCalls) -> apb.ExecutorOutcome:
    """Loop until a final answer, the step limit, the budget or a failure."""
    out = apb.ExecutorOutcome()
    messages = list(job.messages)
    for _ in range(job.max_steps):
        request = mpb.ChatRequest(messages=messages, tools=job.tools, max_tokens=job.max_tokens)
        answer = client.complete(
            apb.ModelCallRequest(session=job.session, turn_id=job.turn_id, request=request),
            timeout=_CALL_TIMEOUT_S,
        )
        out.model_calls += 1
        if answer.budget_exhausted:
            return _failed(out, tpb.TURN_ERROR_KIND_BUDGET, answer.message)
        if answer.HasField("error"):
            return _failed(out, tpb.TURN_ERROR_KIND_MODEL, answer.error.message)
        response = answer.response
        out.prompt_tokens += response.usage.prompt_tokens
        out.completion_tokens += response.usage.completion_tokens
        message = response.message
        out.text = message.content
        messages.append(message)
        if not message.tool_calls:
            return out
        for call in message.tool_calls:
            result = client.call_tool(
                apb.ToolCallRequest(
                    session=job.session,
                    turn_id=job.turn_id,
                    call_id=call.id,
                    tool=tool_name(call.name),
                    arguments_json=call.arguments_json,
                ),
                timeout=_CALL_TIMEOUT_S,
            )
            out.tool_calls += 1
            messages.append(
                mpb.ChatMessage(
                    role=mpb.ROLE_TOOL,
                    content=result.result_json if result.ok else result.error,
                    tool_call_id=call.id,
                    tool_error=not result.ok,
                )
            )
    return _failed(
        out,
        tpb.TURN_ERROR_KIND_STEPS,
        f"the turn reached its limit of {job.max_steps} model calls (agent.max_steps) "
        "without a final answer",
    )


def _failed(
    out: apb.ExecutorOutcome, kind: tpb.TurnErrorKind.ValueType, message: str
) -> apb.ExecutorOutcome:
    out.error_kind = kind
    out.error_message = message
    return out


class CoreLink:
    """The executor's one connection to the core, opened at the first job
    and kept for the process's life: a turn's calls go over it with the
    turn's token (``Client.with_credential``), so a turn costs no socket and
    no HTTP/2 handshake (under load, connecting per turn timed out waiting
    for the core's SETTINGS frame). A job naming another socket replaces
    it. After UNAVAILABLE the SDK reconnects it at the next call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client: Client | None = None

    def client(self, core_socket: str, token: Token) -> Client:
        """A client for one turn: ``token`` over the connection to ``core_socket``."""
        with self._lock:
            current = self._client
            if current is None or current.socket != core_socket:
                # The connection's own credential is never presented: every
                # call goes through a client derived for its turn.
                fresh = Client.connect(core_socket, token)
                self._client = fresh
                if current is not None:
                    current.close()
                current = fresh
            return current.with_credential(token)

    def close(self) -> None:
        with self._lock:
            current, self._client = self._client, None
        if current is not None:
            current.close()


def build(link: CoreLink) -> Plugin:
    """The executor plugin, its turns going to the core over ``link``."""
    built = Plugin("executor")

    @built.tool(EXECUTOR_TOOL)
    def turn(job: str) -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
        try:
            parsed = apb.ExecutorJob.FromString(base64.b64decode(job, validate=True))
            token = Token.from_bytes(parsed.token)
        except (binascii.Error, ValueError, DecodeError, TokenError) as exc:
            raise ToolFailed(f"job is not a base64 ExecutorJob with a token: {exc}") from None
        try:
            outcome = run_turn(parsed, link.client(parsed.core_socket, token))
        except SdkError as exc:
            outcome = apb.ExecutorOutcome(
                error_kind=tpb.TURN_ERROR_KIND_EXECUTOR,
                error_message=f"the executor lost the core: {exc}",
            )
        return {"outcome": base64.b64encode(outcome.SerializeToString()).decode("ascii")}

    return built


def main(args: Sequence[str]) -> int:
    """The executor process: the plugin worker, holding its :class:`CoreLink`."""
    link = CoreLink()
    try:
        return build(link).main(args)
    finally:
        link.close()
