"""HTTP statuses, provider error bodies and httpx exceptions -> the errors
of :mod:`naga_plugins.models.errors`. The only place httpx's exceptions are
read; nothing foreign leaves the adapter.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import re
import socket
import time
from collections.abc import Mapping
from typing import Any, cast

import attrs
import httpx

from naga.v1 import model_pb2
from naga_plugins.models._config import Endpoint, Timeouts
from naga_plugins.models.errors import (
    AuthRefused,
    BadResponse,
    InputRefused,
    ModelCallFailed,
    ModelNotFound,
    QuotaExhausted,
    RateLimited,
    ServerFailed,
    StreamCut,
    TimedOut,
    Unreachable,
)

#: Longest provider message kept in an error (they can be whole HTML pages).
MAX_PROVIDER_MESSAGE = 500
#: 429 error codes that mean "no credit left" rather than "slow down".
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "quota_exceeded"})
#: Error types in Anthropic error events that are worth retrying as a 429.
_RATE_LIMIT_CODES = frozenset({"rate_limit_error", "rate_limit_exceeded"})
_SPACE = re.compile(r"\s+")
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


@attrs.frozen
class Redactor:
    """Removes the API key from text that came back from the provider (an
    error message that echoes the key it refused)."""

    secret: str = attrs.field(repr=False)

    def __call__(self, text: str) -> str:
        if self.secret and self.secret in text:
            text = text.replace(self.secret, "[api key removed]")
        text = _SPACE.sub(" ", text).strip()
        if len(text) > MAX_PROVIDER_MESSAGE:
            text = text[: MAX_PROVIDER_MESSAGE - 3] + "..."
        return text


def error_details(body: bytes) -> tuple[str, str]:
    """``(message, code)`` from a provider's error body, whatever its shape:
    OpenAI's and Anthropic's ``{"error": {...}}``, vLLM's top-level
    ``message``, Ollama's ``{"error": "text"}``, or not JSON at all."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        title = _TITLE.search(body)
        if title:
            return f"an HTML page: {title.group(1).decode('utf-8', 'replace')}", ""
        return body.decode("utf-8", "replace"), ""
    if not isinstance(data, dict):
        return str(cast(object, data)), ""
    top = cast("dict[str, object]", data)
    error = top.get("error", top)
    if isinstance(error, str):
        return error, ""
    if not isinstance(error, dict):
        return json.dumps(top)[:MAX_PROVIDER_MESSAGE], ""
    fields = cast("dict[str, object]", error)
    message = fields.get("message", "")
    code = fields.get("code")
    if not (isinstance(code, str) and code):
        code = fields.get("type", "")
    return (
        message if isinstance(message, str) else json.dumps(message),
        code if isinstance(code, str) else "",
    )


def retry_after_s(headers: Mapping[str, str]) -> float:
    """The wait the provider asked for, in seconds; 0 when it asked none.
    ``retry-after-ms`` (OpenAI) is finer than ``retry-after``, which may be
    seconds or an HTTP date."""
    value: float | None = None
    raw_ms = headers.get("retry-after-ms")
    raw = headers.get("retry-after")
    try:
        if raw_ms is not None:
            value = float(raw_ms) / 1000
        elif raw is not None:
            value = float(raw)
    except ValueError:
        value = None
    if value is None and raw:
        try:
            value = email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
        except (TypeError, ValueError):
            value = None
    if value is None or not math.isfinite(value):
        return 0.0
    return max(value, 0.0)


def http_failure(
    endpoint: Endpoint, status: int, headers: Mapping[str, str], body: bytes, redact: Redactor
) -> ModelCallFailed:
    """The error for a non-2xx answer."""
    message, code = error_details(body)
    common: dict[str, Any] = {
        "provider": endpoint.provider,
        "http_status": status,
        "provider_message": redact(message),
        "provider_code": redact(code),
        "retry_after_s": retry_after_s(headers),
    }
    if status in (401, 403):
        what = "refused the API key" if status == 401 else "refused access (forbidden)"
        return AuthRefused(what, hint="check api_key in providers.json", **common)
    if status == 402:
        return QuotaExhausted("says the account has no credit left", **common)
    if status == 404:
        return ModelNotFound(
            f"has no such model or endpoint (model {endpoint.model!r} at {endpoint.base_url})",
            hint="check base_url and model in providers.json",
            **common,
        )
    if status == 408:
        return TimedOut("timed out waiting for the request", retryable=True, **common)
    if status == 429:
        if code in _QUOTA_CODES:
            return QuotaExhausted("says the account's quota is used up", **common)
        return RateLimited("is rate limiting requests", retryable=True, **common)
    if 400 <= status < 500:
        return InputRefused("refused the request", **common)
    if status >= 500:
        what = "is overloaded" if status == 529 else "failed"
        return ServerFailed(what, retryable=True, **common)
    location = headers.get("location", "").split("?", 1)[0]
    hint = f"it redirects to {location}; set base_url to that" if location else ""
    return BadResponse(f"answered with HTTP status {status}", hint=hint, **common)


def stream_error(
    endpoint: Endpoint,
    message: str,
    code: str,
    redact: Redactor,
    partial: model_pb2.ChatResponse | None,
) -> ModelCallFailed:
    """An error event inside a stream (Anthropic's ``error``, or an OpenAI
    chunk holding ``error``)."""
    common: dict[str, Any] = {
        "provider": endpoint.provider,
        "provider_message": redact(message),
        "provider_code": redact(code),
        "retryable": True,
        "partial": partial,
    }
    if code in _RATE_LIMIT_CODES:
        return RateLimited("is rate limiting requests (error event in the stream)", **common)
    return ServerFailed("reported an error in the middle of the stream", **common)


def _reason(exc: BaseException) -> str:
    """The innermost OS error's words ("Connection refused"), not the
    wrappers' ("all attempts to connect to ... failed")."""
    seen: BaseException | None = exc
    for _ in range(10):  # cause chains are short; a cycle must not hang us
        if seen is None:
            break
        if isinstance(seen, socket.gaierror) and seen.strerror:
            return seen.strerror
        if isinstance(seen, OSError) and seen.errno:
            return os.strerror(seen.errno)
        if isinstance(seen, BaseExceptionGroup):
            group = cast("BaseExceptionGroup[BaseException]", seen)
            seen = group.exceptions[0]
        else:
            seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


def transport_failure(
    endpoint: Endpoint,
    timeouts: Timeouts,
    exc: httpx.TransportError,
    *,
    answered: bool,
    chunks: int,
    partial: model_pb2.ChatResponse | None,
) -> ModelCallFailed:
    """The error for an httpx exception; ``answered`` once the status line
    arrived (a failure after it is a cut or a stall, not a refusal)."""
    provider = endpoint.provider
    reason = _reason(exc)
    if isinstance(exc, httpx.ConnectTimeout):
        return Unreachable(
            f"cannot connect to {endpoint.host}: no answer within {timeouts.connect_s:g} s",
            provider=provider,
            retryable=True,
        )
    if isinstance(exc, httpx.ConnectError):
        return Unreachable(
            f"cannot connect to {endpoint.host}: {reason}",
            provider=provider,
            retryable=True,
            hint="check that the server is running and that base_url is right",
        )
    if isinstance(exc, httpx.ReadTimeout):
        if answered and chunks:
            what = f"stalled: no data for {timeouts.read_s:g} s after {chunks} chunks"
        else:
            what = f"sent no answer for {timeouts.read_s:g} s (the read timeout)"
        return TimedOut(what, provider=provider, partial=partial)
    if isinstance(exc, httpx.WriteTimeout):
        return TimedOut(
            f"did not take the request within {timeouts.write_s:g} s", provider=provider
        )
    if isinstance(exc, httpx.PoolTimeout):
        return TimedOut(f"no free connection within {timeouts.pool_s:g} s", provider=provider)
    if isinstance(exc, httpx.DecodingError):
        return BadResponse(f"sent a body that cannot be decoded: {reason}", provider=provider)
    if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError):
        if not answered:
            return ServerFailed(
                f"closed the connection without answering ({reason})",
                provider=provider,
                retryable=True,
            )
        where = f"after {chunks} chunks" if partial is not None else "before its end"
        return StreamCut(
            f"the answer was cut {where}: {reason}",
            provider=provider,
            retryable=True,
            partial=partial,
        )
    return Unreachable(f"cannot talk to {endpoint.host}: {reason}", provider=provider)
