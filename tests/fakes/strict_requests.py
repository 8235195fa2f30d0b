"""Request bodies checked as strictly as the real servers check them.

``openai``: llama-cpp-python 0.3.36's server (the embedded model) types each
message as a union of TypedDicts (``llama_cpp/llama_types.py``): the
assistant's ``content`` is ``NotRequired[str]`` (null refused: the bug that
made every tool follow-up of the local model fail with "7 validation
errors"), a tool message needs ``tool_call_id``. On top of that, what
OpenAI's own API refuses: a tool message that answers no call of the
assistant message before it, a call left unanswered before the next
message, unknown fields.

``anthropic``: the Messages API: ``max_tokens`` required, roles only user
and assistant, the first a user, ``tool_result`` blocks only in a user
message right after the assistant's ``tool_use`` blocks, each id answered.

:func:`refusal` returns the validation errors as one line, or "" if the
body would be taken.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic

_Strict = pydantic.ConfigDict(extra="forbid", strict=True)


class _Model(pydantic.BaseModel):
    model_config = _Strict


# --- OpenAI-compatible -------------------------------------------------------------------


class _Function(_Model):
    name: str
    arguments: str


class _ToolCall(_Model):
    id: str
    type: Literal["function"]
    function: _Function


class _System(_Model):
    role: Literal["system"]
    content: str | None


class _User(_Model):
    role: Literal["user"]
    content: str | None


class _Assistant(_Model):
    role: Literal["assistant"]
    content: str = ""  # NotRequired[str]: absent is fine, null is not
    tool_calls: list[_ToolCall] | None = None


class _Tool(_Model):
    role: Literal["tool"]
    content: str | None
    tool_call_id: str


_OpenAIMessage = _System | _User | _Assistant | _Tool


class _FunctionSpec(_Model):
    name: str = pydantic.Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = ""
    parameters: dict[str, Any]


class _ToolSpec(_Model):
    type: Literal["function"]
    function: _FunctionSpec


class _StreamOptions(_Model):
    include_usage: bool


class _OpenAIRequest(_Model):
    model: str
    messages: list[_OpenAIMessage] = pydantic.Field(min_length=1)
    tools: list[_ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    stop: list[str] | None = None
    stream: bool = False
    stream_options: _StreamOptions | None = None


def _openai_pairing(request: _OpenAIRequest) -> str:
    open_calls: set[str] = set()
    for index, message in enumerate(request.messages):
        if isinstance(message, _Tool):
            if message.tool_call_id not in open_calls:
                return (
                    f"messages.{index}: a 'tool' message must answer a call of the "
                    "assistant message before it"
                )
            open_calls.discard(message.tool_call_id)
            continue
        if open_calls:
            return f"messages.{index}: the calls {sorted(open_calls)} were not answered"
        if isinstance(message, _Assistant) and message.tool_calls:
            open_calls = {call.id for call in message.tool_calls}
    return f"the calls {sorted(open_calls)} were not answered" if open_calls else ""


# --- Anthropic ---------------------------------------------------------------------------


class _Text(_Model):
    type: Literal["text"]
    text: str = pydantic.Field(min_length=1)


class _ToolUse(_Model):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class _ToolResult(_Model):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[_Text]
    is_error: bool = False


_Block = _Text | _ToolUse | _ToolResult


class _AnthropicMessage(_Model):
    role: Literal["user", "assistant"]
    content: str | list[_Block]


class _AnthropicTool(_Model):
    name: str = pydantic.Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = ""
    input_schema: dict[str, Any]


class _AnthropicRequest(_Model):
    model: str
    max_tokens: int = pydantic.Field(ge=1)
    messages: list[_AnthropicMessage] = pydantic.Field(min_length=1)
    system: str | None = None
    tools: list[_AnthropicTool] | None = None
    tool_choice: dict[str, Any] | None = None
    temperature: float | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False


def _blocks(message: _AnthropicMessage) -> list[_Block]:
    if isinstance(message.content, str):
        return [_Text(type="text", text=message.content)] if message.content else []
    return message.content


def _anthropic_pairing(request: _AnthropicRequest) -> str:
    if request.messages[0].role != "user":
        return "messages.0: the first message must use the 'user' role"
    asked: set[str] = set()
    for index, message in enumerate(request.messages):
        blocks = _blocks(message)
        if not blocks:
            return f"messages.{index}: content must not be empty"
        if index and message.role == request.messages[index - 1].role:
            return f"messages.{index}: roles must alternate between 'user' and 'assistant'"
        results = {b.tool_use_id for b in blocks if isinstance(b, _ToolResult)}
        if message.role == "assistant":
            if asked:
                return f"messages.{index}: tool_use ids {sorted(asked)} have no tool_result"
            if results:
                return f"messages.{index}: tool_result blocks belong in a user message"
            asked = {b.id for b in blocks if isinstance(b, _ToolUse)}
            continue
        if results - asked:
            return (
                f"messages.{index}: unexpected tool_use_id {sorted(results - asked)} in "
                "tool_result blocks: each must answer a tool_use of the previous message"
            )
        if asked - results:
            return f"messages.{index}: tool_use ids {sorted(asked - results)} have no tool_result"
        asked = set()
    return ""


def refusal(api: Literal["openai", "anthropic"], body: Any) -> str:
    """Why the real server would refuse ``body`` (parsed JSON), or ""."""
    try:
        if api == "openai":
            return _openai_pairing(_OpenAIRequest.model_validate(body))
        return _anthropic_pairing(_AnthropicRequest.model_validate(body))
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        return f"{exc.error_count()} validation errors: {errors}"


__all__ = ["refusal"]
