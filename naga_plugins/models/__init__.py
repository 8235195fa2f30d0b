"""Model-provider adapters: the code a provider plugin runs to reach one
model API over HTTP, the only network egress in Naga.

A request and its answer are ``naga.v1`` messages (proto/naga/v1/model.proto);
an adapter maps them onto OpenAI-compatible chat completions or Anthropic
messages, retries what is worth retrying, and fails with one of the errors
in :mod:`naga_plugins.models.errors`. This package imports no ``naga_core``:
it runs in a sandboxed plugin process (docs/design/models.md).
"""

from naga_plugins.models._adapter import (
    ANTHROPIC_DEFAULT_MAX_TOKENS,
    MAX_ERROR_BODY_BYTES,
    MAX_RESPONSE_BYTES,
    ModelAdapter,
    Transport,
)
from naga_plugins.models._anthropic import ANTHROPIC_VERSION
from naga_plugins.models._assemble import Assembler
from naga_plugins.models._attempt import OnChunk
from naga_plugins.models._config import Clock, Endpoint, RetryPolicy, Timeouts, TrioClock
from naga_plugins.models._sse import SseDecoder, SseError, SseEvent
from naga_plugins.models._textcalls import extract_text_tool_calls
from naga_plugins.models._visible import VisibleText

__all__ = [
    "ANTHROPIC_DEFAULT_MAX_TOKENS",
    "ANTHROPIC_VERSION",
    "MAX_ERROR_BODY_BYTES",
    "MAX_RESPONSE_BYTES",
    "Assembler",
    "Clock",
    "Endpoint",
    "ModelAdapter",
    "OnChunk",
    "RetryPolicy",
    "SseDecoder",
    "SseError",
    "SseEvent",
    "Timeouts",
    "Transport",
    "TrioClock",
    "VisibleText",
    "extract_text_tool_calls",
]
