"""The agent executor: one turn of one session, in a sandbox with no network.

The core launches this module in its executor pool and calls its one tool,
``executor.turn``, with a job (``naga.v1.ExecutorJob``); :func:`run_turn`
loops model call, tool calls, model call... through the core with the
turn's capability token until a final answer, the step limit, the budget or
a failure, and answers a ``naga.v1.ExecutorOutcome`` (docs/design/executor.md).
"""

from naga.constants import EXECUTOR_TOOL
from naga.executor import CoreCalls, run_turn, tool_name
from naga_plugins.executor._worker import CoreLink, build, main

__all__ = ["EXECUTOR_TOOL", "CoreCalls", "CoreLink", "build", "main", "run_turn", "tool_name"]
