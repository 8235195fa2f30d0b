"""What an adapter is configured with: the endpoint, its timeouts, its retry
policy and the clock it waits on.

The clock is a seam so that tests can run the retry loop on virtual time
(a 30 s Retry-After costs nothing); in production it is trio's.
"""

from __future__ import annotations

import math
import random
import re
import urllib.parse
from typing import Protocol

import attrs
import trio

from naga_plugins.models.errors import EndpointConfigError

_PROVIDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")


@attrs.frozen(kw_only=True)
class Endpoint:
    """One provider's HTTP API: where, with which key, which model.

    Build it with :meth:`of`, which validates; ``repr`` never shows the key.
    """

    provider: str
    base_url: str
    api_key: str = attrs.field(repr=False)
    model: str

    @classmethod
    def of(cls, *, provider: str, base_url: str, api_key: str, model: str) -> Endpoint:
        if not _PROVIDER_NAME.fullmatch(provider):
            raise EndpointConfigError(
                f"provider name {provider!r} must be 1-64 letters, digits, '_', '.' or '-'"
            )
        try:
            parts = urllib.parse.urlsplit(base_url)
            parts.port  # noqa: B018  (raises on a malformed port)
        except ValueError as exc:
            raise EndpointConfigError(f"{provider}: base_url {base_url!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointConfigError(
                f"{provider}: base_url {base_url!r} must be an http:// or https:// URL with a host"
            )
        if parts.username is not None or parts.query or parts.fragment:
            raise EndpointConfigError(
                f"{provider}: base_url must hold no user, query or fragment "
                "(the key goes in api_key)"
            )
        if _CONTROL.search(api_key):
            # A header value with a newline would be refused by httpx deep in
            # the call (or worse, split a header); say so here, without the key.
            raise EndpointConfigError(f"{provider}: api_key holds whitespace or control characters")
        if not model or _CONTROL.search(model):
            raise EndpointConfigError(f"{provider}: model must be a non-empty name without spaces")
        return cls(provider=provider, base_url=base_url.rstrip("/"), api_key=api_key, model=model)

    @property
    def host(self) -> str:
        """``host:port`` as a person would name it in an error."""
        return urllib.parse.urlsplit(self.base_url).netloc


def _positive(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise EndpointConfigError(f"{attribute.name} must be a positive number, not {value!r}")


def _at_least_one(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise EndpointConfigError(f"{attribute.name} must be at least 1, not {value!r}")


@attrs.frozen(kw_only=True)
class Timeouts:
    """Seconds. ``read_s`` bounds each wait for bytes (a stall), not the
    whole answer; ``deadline_s`` bounds the whole call, retries and their
    waits included."""

    connect_s: float = attrs.field(default=10.0, validator=_positive)
    # A non-streamed answer arrives in one piece after the whole generation,
    # so the read timeout must cover a long answer from a slow model.
    read_s: float = attrs.field(default=300.0, validator=_positive)
    write_s: float = attrs.field(default=30.0, validator=_positive)
    pool_s: float = attrs.field(default=10.0, validator=_positive)
    deadline_s: float = attrs.field(default=600.0, validator=_positive)

    def httpx_extension(self) -> dict[str, float]:
        """The per-request ``timeout`` extension httpx transports read."""
        return {
            "connect": self.connect_s,
            "read": self.read_s,
            "write": self.write_s,
            "pool": self.pool_s,
        }


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """Exponential backoff with jitter; a provider's Retry-After wins.

    ``max_attempts`` counts every HTTP attempt (1 means no retry). A
    Retry-After longer than ``max_retry_after_s`` (or past the deadline) is
    not waited for: the call fails at once, saying how long to wait.
    """

    max_attempts: int = attrs.field(default=4, validator=_at_least_one)
    base_delay_s: float = attrs.field(default=1.0, validator=_positive)
    max_delay_s: float = attrs.field(default=30.0, validator=_positive)
    max_retry_after_s: float = attrs.field(default=120.0, validator=_positive)

    def backoff_s(self, failures: int, rng: random.Random) -> float:
        """The wait after the ``failures``-th failed attempt (from 1).

        "Equal jitter": half the exponential step is fixed, half random, so
        clients that failed together do not retry together, yet never retry
        at once.
        """
        step = min(self.max_delay_s, self.base_delay_s * 2.0 ** (failures - 1))
        return step / 2 + rng.uniform(0, step / 2)


class Clock(Protocol):
    """Time as the retry loop sees it."""

    def now(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    async def sleep(self, seconds: float) -> None: ...


@attrs.frozen
class TrioClock:
    """The real clock: trio's."""

    def now(self) -> float:
        return trio.current_time()

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)
