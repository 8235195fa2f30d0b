"""The agent loop of one turn (docs/design/executor.md), shared by the
executor process (``naga_plugins.executor``) and the core's replay."""

from naga.executor._loop import CoreCalls, Deadline, run_turn, tool_name

__all__ = ["CoreCalls", "Deadline", "run_turn", "tool_name"]
