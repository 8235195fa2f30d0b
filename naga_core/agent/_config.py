"""How the agent side runs: the pool, the budget, the prompt."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from naga.constants import IDEMPOTENCY_KEYS_KEPT, SESSIONS_KEPT
from naga.tokens import Risk
from naga.trust import TrustLevel
from naga_core.agent._errors import AgentError

#: The highest tool risk a turn may reach, by the trust of its peer. The
#: owner's agent may change things (R3) but destructive, irreversible tools
#: (R4) are the owner's own commands, never the model's choice.
RISK_BY_TRUST: Mapping[TrustLevel, Risk] = MappingProxyType(
    {
        TrustLevel.UNTRUSTED: Risk.R0,
        TrustLevel.GUEST: Risk.R1,
        TrustLevel.KNOWN: Risk.R2,
        TrustLevel.OWNER: Risk.R3,
    }
)

#: The role of an executor's capability token (naga_core.daemon._policy.EXECUTOR).
EXECUTOR_ROLE = "executor"

SYSTEM_PROMPT = (
    "You are Naga, a personal assistant. Answer briefly and plainly. "
    "Use a tool only when it helps; a tool error tells you what went wrong."
)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """``executors``: warm executor processes; ``turn_budget``: tokens (in
    and out, summed over its model calls) one turn may spend;
    ``history_entries``: earlier messages and replies in a prompt;
    ``model_read_timeout_s``/``model_max_retries``: the provider's stall
    timeout and retries (0 and -1: the adapter's defaults); ``local_model``:
    with no providers.json, start the embedded local model at the first
    turn that needs one (docs/adr/0005-local-model.md)."""

    executors: int = 2
    turn_budget: int = 200_000
    history_entries: int = 40
    system_prompt: str = SYSTEM_PROMPT
    max_tokens: int = 0
    model_read_timeout_s: float = 0.0
    model_max_retries: int = -1
    turn_timeout_s: float = 600.0
    local_model: bool = True
    risk_by_trust: Mapping[TrustLevel, Risk] = field(default_factory=lambda: RISK_BY_TRUST)
    keys_kept: int = IDEMPOTENCY_KEYS_KEPT
    sessions_kept: int = SESSIONS_KEPT

    def __post_init__(self) -> None:
        for name in ("keys_kept", "sessions_kept"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AgentError(f"AgentConfig.{name} must be a positive integer, not {value!r}")


__all__ = ["EXECUTOR_ROLE", "RISK_BY_TRUST", "SYSTEM_PROMPT", "AgentConfig"]
