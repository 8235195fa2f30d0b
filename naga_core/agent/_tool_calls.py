"""One tool call of a turn, from its approval to its effect
(docs/design/tools.md).

* At or above ``tools.approve_from`` the call waits for the owner
  (naga_core.approvals); a deny or no answer is the model's error.
* A plugin with the ``workspace`` capability stages its writes in its
  result; a ``shell`` plugin's result is a plan the core runs in a sandbox
  of its own over a staged copy of the workspace. Either way the writes are
  captured against the live tree and journaled as one perform effect whose
  undo restores the prior bytes (naga_core.workspace). Workspace writes are
  serialized: each capture sees the tree its effect changes.
* Any other call at R1 or above changed something Naga cannot undo: an
  irreversible perform says so, and a rollback's dry run lists it.
* A read (R0) changes nothing and journals nothing beyond its trace.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import cast

import trio

import sandbox
from naga.plugin import Manifest, ToolSpec, check_arguments
from naga.plugin.errors import InvalidArguments
from naga.policy import TrustPolicy
from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import agent_pb2 as apb
from naga.v1 import tools_pb2 as tlpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import _sessions as rec
from naga_core.agent._core import Core
from naga_core.agent._recover import TOOL_EFFECT
from naga_core.agent._tools import offered
from naga_core.agent._turn import Running
from naga_core.approvals import Approvals
from naga_core.kernel import Kernel, KernelError
from naga_core.plugins import PluginError, PluginHost, ToolArgumentsInvalid
from naga_core.workspace import Captured, ShellRunner, Workspace, WorkspaceError

log = logging.getLogger("naga.agent")

#: Longest tool output handed back to the model, in characters.
RESULT_CHARS = 16_000


@dataclass(frozen=True, slots=True)
class Answer:
    ok: bool
    result_json: str = ""
    error: str = ""


def setting_risk(core: Core, name: str) -> Risk:
    return Risk[core.settings.get_text(name)]


def offered_to(
    core: Core, plugins: PluginHost, running: Running, policy: TrustPolicy
) -> list[ToolSpec]:
    """The tools ``running`` is offered under ``policy``, its trust's row
    (naga_core.agent._tools.offered)."""
    return offered(
        plugins,
        policy,
        owner=running.trust is TrustLevel.OWNER,
        shipped_max=setting_risk(core, "tools.max_risk"),
        approve_from=setting_risk(core, "tools.approve_from"),
    )


#: The shipped tool plugins a fresh install enables.
SHIPPED_TOOLS = ("fs", "shell", "web")
#: The shipped plugin whose egress is ``web.allowed_hosts`` (on ports 80, 443).
WEB_PLUGIN = "web"


def web_open_hosts(core: Core, plugins: PluginHost, manifest: Manifest) -> list[str]:
    """The hosts the shipped ``web`` plugin may fetch from, read per
    connection (``web.allowed_hosts``, ``*`` by default: any public host;
    the proxy's address checks still refuse loopback and private ranges).
    Any other plugin, a third-party one of the same name too: none."""
    if manifest.name != WEB_PLUGIN:
        return []
    installed = plugins.view(manifest.name).installed
    if installed is None or not installed.shipped:
        return []
    return core.settings.get_text("web.allowed_hosts").split(",")


#: Registered once they were: the owner's later disable is not undone at the next start.
_DEFAULTS_KEY = ("tools", "defaults_enabled")


async def enable_shipped_tools(core: Core, plugins: PluginHost) -> None:
    """On a fresh home, enable the shipped tools (which of their tools a turn
    sees is ``tools.max_risk``: R2 by default); journaled, once. The core
    calls it at its start, once its plugin host serves: what ``naga plugin
    list`` shows from the first start is what a turn is offered."""
    if core.kernel.state.get(_DEFAULTS_KEY) is not None:
        return
    known = {v.name for v in plugins.views()}

    def enable() -> None:
        for name in SHIPPED_TOOLS:
            if name in known:
                try:
                    plugins.enable(name)
                except PluginError as exc:  # the core serves without it; the log says why
                    log.warning("the shipped tool plugin %s cannot be enabled: %s", name, exc)
        core.kernel.register(*_DEFAULTS_KEY, True, description="the shipped tools enabled")

    core.write(enable)
    if await trio.to_thread.run_sync(core.settle):
        core.notify_appended()


def journal_reply(kernel: Kernel, running: Running, reply_seq: int) -> int:
    """A reply went to its peer: an irreversible effect (staged with the
    reply record), so a rollback's dry run lists what it cannot take back."""
    return kernel.perform(
        [],
        None,
        description=(
            f"reply of turn {running.id} sent in session {running.session} "
            f"(record {reply_seq}): it cannot be unsent"
        ),
    )


class ToolCalls:
    """The core's side of ToolService.Call once the call is known allowed."""

    def __init__(
        self,
        core: Core,
        plugins: PluginHost,
        workspace: Workspace,
        approvals: Approvals,
        forker: sandbox.Forker,
    ) -> None:
        self._core = core
        #: The core's: it forks every shell command.
        self._forker = forker
        self._plugins = plugins
        self.workspace = workspace
        self.approvals = approvals
        self._writes = trio.Lock()
        self._shell: ShellRunner | None = None

    def _capabilities(self, plugin: str) -> frozenset[str]:
        view = self._plugins.view(plugin)
        return view.installed.manifest.capabilities if view.installed is not None else frozenset()

    def independent_read(self, spec: ToolSpec) -> bool:
        """Whether a call of ``spec`` may run alongside the other reads of
        its model step: R0, asks no approval, and captures no writes (not a
        ``shell`` plugin, whose every call is run and captured by the core)."""
        risk = Risk(int(spec.risk))
        if risk > Risk.R0 or risk >= setting_risk(self._core, "tools.approve_from"):
            return False
        return "shell" not in self._capabilities(spec.name.split(".", 1)[0])

    async def call(
        self, running: Running, spec: ToolSpec, arguments_json: str, call_id: str = ""
    ) -> Answer:
        risk = Risk(int(spec.risk))
        # Checked before the owner is asked, not only by the plugin host:
        # a call that cannot run (``timeout_s: "1.0"``) must not wait for
        # an approval and then fail (the turn's call timed out meanwhile).
        try:
            check_arguments(spec, arguments_json)
        except InvalidArguments as exc:
            raise ToolArgumentsInvalid(str(exc)) from None
        if risk >= setting_risk(self._core, "tools.approve_from"):
            if running.trust is not TrustLevel.OWNER:  # never offered: see _tools.offered
                return Answer(False, error=f"tool {spec.name} needs the owner's approval")
            decision, seq = await self.approvals.ask(
                session=running.session,
                turn_id=running.id,
                tool=spec.name,
                risk=risk.name,
                arguments_json=arguments_json,
                timeout_s=self._core.settings.get_real("tools.approval_timeout_s"),
                on_asked=lambda info: running.emit(_asked(info, call_id)),
            )
            if decision != tlpb.APPROVAL_DECISION_ALLOW:
                why = (
                    "the owner did not answer in time"
                    if decision == tlpb.APPROVAL_DECISION_TIMEOUT
                    else "the owner denied it"
                )
                return Answer(
                    False, error=f"tool {spec.name} was not run: {why} (ledger entry {seq})"
                )
        plugin = spec.name.split(".", 1)[0]
        result, _pid = await self._plugins.invoke(plugin, spec.name, arguments_json, None)
        caps = self._capabilities(plugin)
        what = f"tool {spec.name} in turn {running.id} of session {running.session}"
        # Staged right before the call's workspace effect: a start after a
        # crash finds the effect this call journaled (naga_core.agent._rewind).
        link = apb.TurnRecord(
            session=running.session, turn_id=running.id, tool=spec.name, call_id=call_id
        )
        try:
            if "shell" in caps:
                return await self._run_shell(result, what, link, tuple(running.skill_dirs))
            if "workspace" in caps and risk > Risk.R0:
                return await self._stage(result, what, link)
        except (WorkspaceError, KernelError) as exc:  # refused, or applied and compensated
            return Answer(False, error=f"tool {spec.name}: {exc}")
        if risk > Risk.R0:
            self._core.write(
                lambda: self._core.kernel.perform(
                    [], None, description=f"{what} (its effects cannot be undone by Naga)"
                )
            )
        return Answer(True, result_json=result)

    async def _stage(self, result_json: str, what: str, link: apb.TurnRecord) -> Answer:
        staged = self.workspace.staged_from_result(json.loads(result_json))
        async with self._writes:
            captured = await trio.to_thread.run_sync(self.workspace.capture, staged)
            seq = self._journal(captured, what, link)
        return Answer(True, result_json=_changed_json(captured, seq, {}))

    async def _run_shell(
        self, result_json: str, what: str, link: apb.TurnRecord, skill_dirs: tuple[str, ...]
    ) -> Answer:
        decoded: object = json.loads(result_json)
        plan = cast("dict[str, object]", decoded).get("run") if isinstance(decoded, dict) else None
        if not isinstance(plan, dict):
            return Answer(False, error="the shell plugin answered no plan to run")
        plan = cast("dict[str, object]", plan)
        raw_argv, timeout_s = plan.get("argv"), plan.get("timeout_s")
        if not (isinstance(raw_argv, list) and isinstance(timeout_s, int | float)):
            return Answer(False, error="the shell plugin answered no plan to run")
        argv = [str(a) for a in cast("list[object]", raw_argv)]
        if self._shell is None:
            report = await trio.to_thread.run_sync(sandbox.detect)
            stage = os.path.join(self._core.home.root, "work", "shell-stage")
            self._shell = ShellRunner(stage, report, forker=self._forker)
        shell = self._shell
        async with self._writes:
            root = self.workspace.root
            outcome = await trio.to_thread.run_sync(
                lambda: shell.run(root, argv, float(timeout_s), read_only=skill_dirs)
            )
            captured = await trio.to_thread.run_sync(self.workspace.capture, outcome.staged)
            seq = self._journal(captured, what, link)
        extra: dict[str, object] = {"exit_code": outcome.exit_code, "ended": outcome.ended}
        if outcome.timed_out:
            extra["timed_out"] = True
        if outcome.dropped:
            extra["output_dropped_bytes"] = outcome.dropped
        # The output last: a result too long to show is shown by its head.
        output: dict[str, object] = {"output": outcome.output[:RESULT_CHARS]}
        return Answer(True, result_json=_changed_json(captured, seq, extra, output))

    def _journal(self, captured: Captured | None, what: str, link: apb.TurnRecord) -> int:
        if captured is None:
            return -1
        paths = ", ".join(captured.changed[:5]) + (" ..." if len(captured.changed) > 5 else "")
        description = f"{what}: {len(captured.changed)} path(s) changed ({paths})"
        blobs = (captured.do_blob, captured.undo_blob)

        def journal() -> int:
            # One write: the link, then the effect as the very next record;
            # the kernel's write-ahead commit makes both durable before the
            # tree changes.
            rec.stage(self._core.ledger, TOOL_EFFECT, link, blobs)
            return self.workspace.journal(self._core.kernel, captured, description=description)

        return self._core.write(journal)


def _asked(info: tlpb.PendingApproval, call_id: str) -> tpb.TurnEvent:
    return tpb.TurnEvent(
        approval=tpb.ApprovalAsked(
            id=info.id,
            call_id=call_id,
            tool=info.tool,
            risk=info.risk,
            arguments_json=info.arguments_json,
            expires_ns=info.expires_ns,
            asked_ns=info.asked_ns,
        )
    )


def _changed_json(
    captured: Captured | None,
    seq: int,
    extra: dict[str, object],
    last: dict[str, object] | None = None,
) -> str:
    out: dict[str, object] = dict(extra)
    out["changed"] = list(captured.changed) if captured is not None else []
    if seq >= 0:
        out["effect"] = seq
    out.update(last or {})
    return json.dumps(out, separators=(",", ":"))


__all__ = [
    "SHIPPED_TOOLS",
    "WEB_PLUGIN",
    "Answer",
    "ToolCalls",
    "enable_shipped_tools",
    "web_open_hosts",
    "journal_reply",
    "offered_to",
    "setting_risk",
]
