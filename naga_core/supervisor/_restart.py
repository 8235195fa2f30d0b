"""When to restart a failed worker, and when to stop trying: pure arithmetic.

Each failure is noted at a time (seconds on any monotonic clock; the
supervisor passes trio's, tests pass numbers). The delay before the next
start doubles with each failure inside the window, from ``backoff_s`` up
to ``backoff_max_s``; ``loop_failures`` failures within ``loop_window_s``
are a crash loop, and the supervisor gives up (the plugin is FAILED until
its owner enables it again). Failures older than the window are forgotten,
so a worker that fails once a day is restarted forever, promptly.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from naga_core.errors import NagaError


class SupervisorError(NagaError):
    """Root of the supervisor's own errors."""


class RestartPolicyInvalid(SupervisorError, ValueError):
    """A restart policy or tuning number is out of range."""


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    backoff_s: float = 0.25
    backoff_max_s: float = 30.0
    loop_failures: int = 5
    loop_window_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("backoff_s", "backoff_max_s", "loop_window_s"):
            value: float = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise RestartPolicyInvalid(f"{name} must be a positive number, got {value!r}")
        if self.backoff_max_s < self.backoff_s:
            raise RestartPolicyInvalid(
                f"backoff_max_s {self.backoff_max_s} is below backoff_s {self.backoff_s}"
            )
        if isinstance(self.loop_failures, bool) or self.loop_failures < 1:
            raise RestartPolicyInvalid(
                f"loop_failures must be at least 1, got {self.loop_failures!r}"
            )

    def history(self) -> RestartHistory:
        return RestartHistory(self)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after a failure."""

    #: Stop restarting: a crash loop.
    give_up: bool
    #: Seconds to wait before the next start (0 when giving up).
    delay_s: float
    #: Failures within the window, this one included.
    failures: int

    def describe(self, policy: RestartPolicy) -> str:
        if self.give_up:
            return (
                f"crash loop: {self.failures} failures within {policy.loop_window_s:g} s; "
                "not restarted until enabled again"
            )
        return f"failure {self.failures} within {policy.loop_window_s:g} s"


class RestartHistory:
    """One worker's recent failures (owned by its supervisor task)."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._times: deque[float] = deque()

    def failed(self, now: float) -> Decision:
        """Note a failure at ``now`` and decide."""
        if self._times and now < self._times[-1]:
            raise RestartPolicyInvalid(f"time went backwards: {now} after {self._times[-1]}")
        horizon = now - self.policy.loop_window_s
        while self._times and self._times[0] <= horizon:
            self._times.popleft()
        self._times.append(now)
        n = len(self._times)
        if n >= self.policy.loop_failures:
            return Decision(give_up=True, delay_s=0.0, failures=n)
        # 2 ** (n - 1) grows past any float quickly; cap the exponent first.
        delay = self.policy.backoff_s * 2.0 ** min(n - 1, 60)
        return Decision(give_up=False, delay_s=min(delay, self.policy.backoff_max_s), failures=n)

    def reset(self) -> None:
        """Forget every failure (the owner enabled the worker again)."""
        self._times.clear()

    @property
    def failures(self) -> int:
        return len(self._times)


__all__ = ["Decision", "RestartHistory", "RestartPolicy", "RestartPolicyInvalid", "SupervisorError"]
