"""The agent side of the core: turns, the executor pool, the model-provider
worker, and the services executors call (docs/design/executor.md)."""

from naga_core.agent._agent import SESSION, Agent
from naga_core.agent._config import EXECUTOR_ROLE, SYSTEM_PROMPT, AgentConfig
from naga_core.agent._core import Caller, Core
from naga_core.agent._core_tools import CoreTool, CoreToolAnswer, CoreTools, TurnView
from naga_core.agent._describe import describe_turn_record
from naga_core.agent._distill import COVERED_NOTHING, NOTHING_NEW, Distilled, distill
from naga_core.agent._distill_due import ARCHIVED_FAMILY, DISTILL, DueFold
from naga_core.agent._distill_idle import IDLE_SETTING, IdleFold, watch_idle
from naga_core.agent._distill_runner import Distillations
from naga_core.agent._errors import (
    AgentError,
    AgentUnavailable,
    BadImages,
    NoExecutor,
    NoModelProvider,
    NoTurnRunning,
    SessionNotFound,
    TurnConflict,
)
from naga_core.agent._images import (
    IMAGE_MIMES,
    MAX_IMAGE_BYTES,
    MAX_IMAGES_PER_TURN,
    MAX_TURN_IMAGE_BYTES,
)
from naga_core.agent._lanes import Admission, Cap
from naga_core.agent._sessions import ERROR as TRACE_ERROR
from naga_core.agent._sessions import KINDS as TRACE_KINDS
from naga_core.agent._sessions import MESSAGE as TRACE_MESSAGE
from naga_core.agent._sessions import MODEL as TRACE_MODEL
from naga_core.agent._sessions import REPLY as TRACE_REPLY
from naga_core.agent._sessions import STEER as TRACE_STEER
from naga_core.agent._sessions import TOOL as TRACE_TOOL
from naga_core.agent._sessions import Session
from naga_core.agent._startfold import FoldImageRejected, Follower, StartFold
from naga_core.agent._sweep import spent_ids
from naga_core.agent._tool_calls import (
    SHIPPED_TOOLS,
    WEB_PLUGIN,
    ToolCalls,
    enable_shipped_tools,
    web_open_hosts,
)
from naga_core.agent._turn import Reloading, Running, TurnCursor
from naga_core.agent._workers import LOCAL_MODEL_ROLE, AgentWorkers, LocalModelStatus

__all__ = [
    "IMAGE_MIMES",
    "MAX_IMAGES_PER_TURN",
    "MAX_IMAGE_BYTES",
    "MAX_TURN_IMAGE_BYTES",
    "ARCHIVED_FAMILY",
    "COVERED_NOTHING",
    "NOTHING_NEW",
    "DISTILL",
    "Distillations",
    "Distilled",
    "DueFold",
    "IDLE_SETTING",
    "IdleFold",
    "watch_idle",
    "describe_turn_record",
    "distill",
    "EXECUTOR_ROLE",
    "SESSION",
    "Session",
    "SHIPPED_TOOLS",
    "WEB_PLUGIN",
    "SYSTEM_PROMPT",
    "TRACE_ERROR",
    "TRACE_KINDS",
    "TRACE_MESSAGE",
    "TRACE_MODEL",
    "TRACE_REPLY",
    "TRACE_STEER",
    "TRACE_TOOL",
    "Admission",
    "Agent",
    "AgentConfig",
    "AgentError",
    "AgentUnavailable",
    "AgentWorkers",
    "FoldImageRejected",
    "Follower",
    "LOCAL_MODEL_ROLE",
    "LocalModelStatus",
    "Cap",
    "Caller",
    "Core",
    "CoreTool",
    "CoreToolAnswer",
    "CoreTools",
    "TurnView",
    "NoExecutor",
    "NoModelProvider",
    "Reloading",
    "Running",
    "BadImages",
    "SessionNotFound",
    "StartFold",
    "NoTurnRunning",
    "ToolCalls",
    "TurnConflict",
    "TurnCursor",
    "enable_shipped_tools",
    "spent_ids",
    "web_open_hosts",
]
