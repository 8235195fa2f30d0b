"""What differs between provider APIs, as one interface the adapter drives.

A dialect maps a ``ChatRequest`` to HTTP, and the provider's bytes back to
``naga.v1`` messages; it does no I/O. Provider bodies are validated with
pydantic models at this boundary; what does not validate is a
:class:`Malformed` naming the field, which the adapter reports as
BAD_RESPONSE.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, TypeVar

import attrs
import pydantic

from naga.v1 import model_pb2
from naga_plugins.models._config import Endpoint
from naga_plugins.models._sse import SseEvent

_Model = TypeVar("_Model", bound=pydantic.BaseModel)

#: Largest count a provider may report for a token field (uint32 in the proto).
MAX_TOKENS_FIELD = 2**32 - 1


class Malformed(Exception):
    """The provider's answer breaks its API; the message says where."""


class StreamErrorEvent(Exception):
    """The provider reported an error inside a stream (an ``error`` event)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@attrs.frozen
class HttpCall:
    """One request as bytes; the same for every attempt."""

    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


class StreamDecoder(Protocol):
    """Provider events in, chunks out, for one streamed answer."""

    @property
    def complete(self) -> bool:
        """True once the provider's end-of-stream event arrived."""
        ...

    @property
    def model(self) -> str: ...

    @property
    def provider_finish_reason(self) -> str: ...

    def feed(self, event: SseEvent) -> list[model_pb2.ChatChunk]: ...


class Dialect(Protocol):
    #: "openai" or "anthropic", as providers.json names the API.
    api: str
    #: Whether tool calls written into the text are parsed out of it.
    text_tool_calls: bool

    def build(
        self,
        endpoint: Endpoint,
        request: model_pb2.ChatRequest,
        *,
        stream: bool,
        default_max_tokens: int,
    ) -> HttpCall: ...

    def parse(self, body: bytes) -> model_pb2.ChatResponse: ...

    def stream_decoder(self) -> StreamDecoder: ...


class WireModel(pydantic.BaseModel):
    """Base of the provider body models: unknown fields are the provider's
    business (APIs grow), missing or mistyped ones are errors."""

    model_config = pydantic.ConfigDict(extra="ignore", frozen=True)


def describe(error: pydantic.ValidationError, what: str) -> str:
    """``what``: the first few failures, each as ``path: message``."""
    problems: list[str] = []
    for item in error.errors(include_url=False, include_input=False)[:3]:
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        problems.append(f"{path}: {item['msg']}")
    more = len(error.errors()) - len(problems)
    tail = f" (and {more} more)" if more > 0 else ""
    return f"{what}: " + "; ".join(problems) + tail


def load_json(data: bytes | str, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:
        sample = data[:60] if isinstance(data, str) else data[:60].decode("utf-8", "replace")
        raise Malformed(f"{what} is not JSON ({exc}); it begins {sample!r}") from None


def validate(model: type[_Model], data: object, what: str) -> _Model:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise Malformed(describe(exc, what)) from None
