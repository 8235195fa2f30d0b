"""The agent side of the core: turns, the executor pool, the model-provider
worker, and the services executors call (docs/design/executor.md)."""

from naga_core.agent._agent import SESSION, Agent
from naga_core.agent._config import EXECUTOR_ROLE, RISK_BY_TRUST, SYSTEM_PROMPT, AgentConfig
from naga_core.agent._core import Caller, Core
from naga_core.agent._errors import (
    AgentError,
    AgentUnavailable,
    NoExecutor,
    NoModelProvider,
    SessionNotFound,
    TurnConflict,
)
from naga_core.agent._sessions import KINDS as TRACE_KINDS
from naga_core.agent._turn import Reloading, Running, TurnCursor
from naga_core.agent._workers import LOCAL_MODEL_ROLE, AgentWorkers, LocalModelStatus

__all__ = [
    "EXECUTOR_ROLE",
    "RISK_BY_TRUST",
    "SESSION",
    "SYSTEM_PROMPT",
    "TRACE_KINDS",
    "Agent",
    "AgentConfig",
    "AgentError",
    "AgentUnavailable",
    "AgentWorkers",
    "LOCAL_MODEL_ROLE",
    "LocalModelStatus",
    "Caller",
    "Core",
    "NoExecutor",
    "NoModelProvider",
    "Reloading",
    "Running",
    "SessionNotFound",
    "TurnConflict",
    "TurnCursor",
]
