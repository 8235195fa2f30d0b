"""The executor process: a worker on the plugin wire with one tool, a turn
(:func:`naga.executor.run_turn`, through the core). The executor keeps one
connection to the core for its whole life (:class:`CoreLink`); each turn
presents its own token over it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from naga.constants import EXECUTOR_TOOL
from naga.executor import Deadline, run_turn
from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga.tokens import Token, TokenError
from naga.v1 import agent_pb2 as apb
from naga.v1 import plugin_pb2 as ppb
from naga.v1 import turn_pb2 as tpb
from naga_plugins._plugin import Plugin
from naga_plugins.errors import ToolFailed


class CoreLink:
    """The executor's one connection to the core, opened at the first job
    and kept for the process's life: a turn's calls go over it with the
    turn's token (``Client.with_credential``), so a turn costs no socket and
    no HTTP/2 handshake (under load, connecting per turn timed out waiting
    for the core's SETTINGS frame). A job naming another socket replaces
    it. After UNAVAILABLE the SDK reconnects it at the next call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client: Client | None = None

    def client(self, core_socket: str, token: Token) -> Client:
        """A client for one turn: ``token`` over the connection to ``core_socket``."""
        with self._lock:
            current = self._client
            if current is None or current.socket != core_socket:
                # The connection's own credential is never presented: every
                # call goes through a client derived for its turn.
                fresh = Client.connect(core_socket, token)
                self._client = fresh
                if current is not None:
                    current.close()
                current = fresh
            return current.with_credential(token)

    def close(self) -> None:
        with self._lock:
            current, self._client = self._client, None
        if current is not None:
            current.close()


def build(link: CoreLink) -> Plugin:
    """The executor plugin, its turns going to the core over ``link``."""
    built = Plugin("executor")

    @built.typed_tool(EXECUTOR_TOOL)
    def turn(invoke: ppb.Invoke) -> ppb.Result:  # pyright: ignore[reportUnusedFunction]
        job = invoke.executor_job
        try:
            token = Token.from_bytes(job.token)
        except TokenError as exc:
            raise ToolFailed(f"the job's token is not a token: {exc}") from None
        deadline = Deadline.after_ms(invoke.deadline_ms)
        try:
            outcome = run_turn(job, link.client(job.core_socket, token), deadline)
        except SdkError as exc:
            outcome = apb.ExecutorOutcome(
                error_kind=tpb.TURN_ERROR_KIND_EXECUTOR,
                error_message=f"the executor lost the core: {exc}",
            )
        return ppb.Result(executor_outcome=outcome)

    return built


def main(args: Sequence[str]) -> int:
    """The executor process: the plugin worker, holding its :class:`CoreLink`."""
    link = CoreLink()
    try:
        return build(link).main(args)
    finally:
        link.close()
