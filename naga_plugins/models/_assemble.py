"""Streamed chunks -> the complete response.

Both adapters turn provider events into ``ChatChunk``s and feed them here, so
a streamed call's final ``ChatResponse`` is by construction what the chunks
add up to (a property test checks the algebra), and a cut stream's partial
response is the same assembly stopped early.
"""

from __future__ import annotations

import attrs

from naga.v1 import model_pb2


@attrs.define
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = attrs.Factory(list[str])


class Assembler:
    """Accumulates chunks; :meth:`response` can be called at any point."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, _CallParts] = {}
        self._finish: model_pb2.FinishReason.ValueType = model_pb2.FINISH_REASON_UNSPECIFIED
        self._usage: model_pb2.Usage | None = None
        self.chunks = 0
        #: Set by the adapter from what the provider says.
        self.model = ""
        self.provider_finish_reason = ""

    def add(self, chunk: model_pb2.ChatChunk) -> None:
        self.chunks += 1
        if chunk.text_delta:
            self._text.append(chunk.text_delta)
        for delta in chunk.tool_calls:
            parts = self._calls.setdefault(delta.index, _CallParts())
            # Some servers repeat the id and name on every delta of a call;
            # the first non-empty one is the call's.
            if delta.id and not parts.id:
                parts.id = delta.id
            if delta.name and not parts.name:
                parts.name = delta.name
            if delta.arguments_fragment:
                parts.arguments.append(delta.arguments_fragment)
        if chunk.finish_reason != model_pb2.FINISH_REASON_UNSPECIFIED:
            self._finish = chunk.finish_reason
        if chunk.HasField("usage"):
            self._usage = chunk.usage

    @property
    def text_length(self) -> int:
        return sum(len(part) for part in self._text)

    def unnamed_call(self) -> int | None:
        """The index of a tool call that never got a name, if any."""
        for index, parts in sorted(self._calls.items()):
            if not parts.name:
                return index
        return None

    def response(self) -> model_pb2.ChatResponse:
        message = model_pb2.ChatMessage(role=model_pb2.ROLE_ASSISTANT, content="".join(self._text))
        for _, parts in sorted(self._calls.items()):
            message.tool_calls.add(
                id=parts.id, name=parts.name, arguments_json="".join(parts.arguments) or "{}"
            )
        response = model_pb2.ChatResponse(
            finish_reason=self._finish,
            provider_finish_reason=self.provider_finish_reason,
            model=self.model,
        )
        response.message.CopyFrom(message)
        if self._usage is not None:
            response.usage.CopyFrom(self._usage)
        return response
