"""How the agent side runs: the pool, the prompt, the trust table its
turns are minted from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from naga.constants import IDEMPOTENCY_KEYS_KEPT, SESSIONS_KEPT
from naga.policy import POLICY, TrustPolicy
from naga.trust import TrustLevel
from naga_core.agent._errors import AgentError

#: The role of an executor's capability token (naga_core.daemon._policy.EXECUTOR).
EXECUTOR_ROLE = "executor"

SYSTEM_PROMPT = (
    "You are Naga, a personal assistant. Answer briefly and plainly. "
    "Use a tool only when it helps; a tool error tells you what went wrong."
)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """``executors``: warm executor processes; ``policy``: the trust table
    (:data:`naga.policy.POLICY`, the one the gateway shows: a turn's token
    gets its row's budget, risk ceiling and tools; tests pass the same
    table with smaller budgets); ``history_entries``: earlier messages and replies in a prompt;
    ``model_read_timeout_s``/``model_max_retries``: the provider's stall
    timeout and retries (0 and -1: the adapter's defaults); ``local_model``:
    with no providers.json, start the embedded local model at the first
    turn that needs one (docs/adr/0005-local-model.md)."""

    executors: int = 2
    history_entries: int = 40
    system_prompt: str = SYSTEM_PROMPT
    max_tokens: int = 0
    model_read_timeout_s: float = 0.0
    model_max_retries: int = -1
    turn_timeout_s: float = 600.0
    local_model: bool = True
    #: Summarise history the window drops (docs/adr/0010-prompt-budget.md).
    compact_history: bool = True
    policy: Mapping[TrustLevel, TrustPolicy] = field(default_factory=lambda: POLICY)
    keys_kept: int = IDEMPOTENCY_KEYS_KEPT
    sessions_kept: int = SESSIONS_KEPT

    def __post_init__(self) -> None:
        for name in ("keys_kept", "sessions_kept"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AgentError(f"AgentConfig.{name} must be a positive integer, not {value!r}")
        missing = sorted(level.label for level in TrustLevel if level not in self.policy)
        if missing:
            raise AgentError(f"AgentConfig.policy has no row for {', '.join(missing)}")

    def with_budgets(self, budget: int) -> AgentConfig:
        """This configuration with every row's turn budget set to ``budget``
        (the table otherwise as it is: tests that spend little)."""
        rows = {level: replace(row, turn_budget=budget) for level, row in self.policy.items()}
        return replace(self, policy=MappingProxyType(rows))


__all__ = ["EXECUTOR_ROLE", "SYSTEM_PROMPT", "AgentConfig"]
