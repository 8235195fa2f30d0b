"""Every error the model adapters raise, under one root.

A failed call raises a :class:`ModelCallFailed` subclass, one per
``naga.v1.ModelErrorKind``; ``to_proto()`` gives the ``ModelError`` the
plugin sends to the core. Foreign errors (httpx, json, pydantic) are
translated once, in the adapter, and never escape raw.

The message is for a person: the provider, what happened, the HTTP status
and the provider's own words, how many attempts were made, and what to do.
It never holds the API key: the adapter removes the key from whatever the
provider sent back before it gets here.
"""

from __future__ import annotations

from typing import ClassVar

from naga.v1 import model_pb2

Kind = model_pb2.ModelErrorKind.ValueType


class ProviderError(Exception):
    """Root of every error ``naga_plugins.models`` raises on purpose."""


class EndpointConfigError(ProviderError):
    """An adapter was configured with an unusable endpoint (a base_url that
    is not http(s), an empty model, ...); nothing was sent."""


class ModelCallFailed(ProviderError):
    """A model call failed; ``kind`` says how, ``str(error)`` says it in words.

    ``retryable`` tells the adapter's retry loop whether the same request may
    be sent again; the attributes mirror ``naga.v1.ModelError``.
    """

    kind: ClassVar[Kind] = model_pb2.MODEL_ERROR_KIND_UNSPECIFIED

    def __init__(
        self,
        what: str,
        *,
        provider: str,
        http_status: int = 0,
        provider_message: str = "",
        provider_code: str = "",
        retry_after_s: float = 0.0,
        retryable: bool = False,
        hint: str = "",
        partial: model_pb2.ChatResponse | None = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.provider = provider
        self.http_status = http_status
        self.provider_message = provider_message
        self.provider_code = provider_code
        self.retry_after_s = retry_after_s
        self.retryable = retryable
        self.hint = hint
        self.partial = partial
        #: Set by the retry loop when it gives up; 1 until then.
        self.attempts = 1
        #: Why the retry loop stopped early, if it did (a Retry-After past the
        #: deadline); part of the message.
        self.gave_up_because = ""

    @property
    def kind_name(self) -> str:
        """``"CUT"``, ``"AUTH"``, ...: the enum value's name without its prefix."""
        return model_pb2.ModelErrorKind.Name(self.kind).removeprefix("MODEL_ERROR_KIND_")

    @property
    def message(self) -> str:
        text = f"{self.provider}: {self.what}"
        if self.http_status:
            detail = f": {self.provider_message}" if self.provider_message else ""
            text += f" (HTTP {self.http_status}{detail})"
        elif self.provider_message:
            text += f" ({self.provider_message})"
        if self.gave_up_because:
            text += f"; {self.gave_up_because}"
        elif self.attempts > 1:
            text += f"; gave up after {self.attempts} attempts"
        if self.hint:
            text += f"; {self.hint}"
        return text

    def __str__(self) -> str:
        return self.message

    def to_proto(self) -> model_pb2.ModelError:
        error = model_pb2.ModelError(
            kind=self.kind,
            message=self.message,
            provider=self.provider,
            http_status=self.http_status,
            provider_message=self.provider_message,
            provider_code=self.provider_code,
            attempts=self.attempts,
            retry_after_s=self.retry_after_s,
        )
        if self.partial is not None:
            error.partial.CopyFrom(self.partial)
        return error


class Unreachable(ModelCallFailed):
    """No connection could be made (refused, DNS, TLS, connect timeout)."""

    kind = model_pb2.MODEL_ERROR_KIND_UNREACHABLE


class AuthRefused(ModelCallFailed):
    """The provider refused the credentials (HTTP 401 or 403)."""

    kind = model_pb2.MODEL_ERROR_KIND_AUTH


class RateLimited(ModelCallFailed):
    """HTTP 429, still after the retries, or a wait past the deadline."""

    kind = model_pb2.MODEL_ERROR_KIND_RATE_LIMITED


class ServerFailed(ModelCallFailed):
    """The provider failed (5xx, overloaded, an error event in a stream)."""

    kind = model_pb2.MODEL_ERROR_KIND_SERVER


class BadResponse(ModelCallFailed):
    """The answer is not what the API promises; the message names what."""

    kind = model_pb2.MODEL_ERROR_KIND_BAD_RESPONSE


class TimedOut(ModelCallFailed):
    """No complete answer in time (a stall, HTTP 408, the overall deadline)."""

    kind = model_pb2.MODEL_ERROR_KIND_TIMEOUT


class StreamCut(ModelCallFailed):
    """A streamed answer stopped mid-way; ``partial`` holds what arrived."""

    kind = model_pb2.MODEL_ERROR_KIND_CUT


class InputRefused(ModelCallFailed):
    """The provider refused the request as invalid (400, 413, 422, ...)."""

    kind = model_pb2.MODEL_ERROR_KIND_REFUSED_INPUT


class ModelNotFound(ModelCallFailed):
    """HTTP 404: the URL or the model does not exist at the provider."""

    kind = model_pb2.MODEL_ERROR_KIND_NOT_FOUND


class QuotaExhausted(ModelCallFailed):
    """The account's credit or quota is used up; waiting will not help."""

    kind = model_pb2.MODEL_ERROR_KIND_QUOTA


class InvalidRequest(ModelCallFailed):
    """The adapter refused the request before sending anything."""

    kind = model_pb2.MODEL_ERROR_KIND_INVALID_REQUEST


__all__ = [
    "AuthRefused",
    "BadResponse",
    "EndpointConfigError",
    "InputRefused",
    "InvalidRequest",
    "ModelCallFailed",
    "ModelNotFound",
    "ProviderError",
    "QuotaExhausted",
    "RateLimited",
    "ServerFailed",
    "StreamCut",
    "TimedOut",
    "Unreachable",
]
