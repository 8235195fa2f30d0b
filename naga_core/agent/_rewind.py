"""At start, before an open turn is resumed: may it be, and what must be
undone first (docs/adr/0033-recover13-tool-undo.md, 0042-recover13b-resume.md).

A call whose answer is recorded is replayed, never run again; the calls
that matter are those in flight at the stop (an intent record, no answer),
which the resumed turn runs again. That is safe when repeating it changes
nothing a single run would not:

* its tool is declared read-only (R0), or ``repeatable`` in its manifest
  (web.fetch: a GET), or is one of the core's reads or ``memory.write``
  (a text the subject already holds adds nothing);
* its tool belongs to a plugin whose only capability is ``workspace``: such
  a plugin sees the workspace read-only and only describes its writes; the
  core captured them as one effect with an inverse (naga_core.workspace),
  linked to the call by the ``turn.tool_effect`` record staged right before
  it. That effect, if the crash left it journaled, is undone first through
  the kernel (:meth:`naga_core.kernel.Kernel.revert`, a ledger entry of its
  own), so the call runs again on the tree it found.

Anything else (a shell command, a plugin's R1+ tool not declared
repeatable, the core's job.create, a tool no longer installed) may have
changed something Naga cannot take back: the turn ends with an INTERRUPTED
error naming the call and why, and the tool never runs twice.

The undo looks before it acts: each path of the effect must still be what
the effect left (else a later effect built on it, and the turn ends with
an error saying so); paths already as before it (the effect was aborted,
or a torn tail cut it before it was journaled) need nothing.
"""

from __future__ import annotations

from naga.plugin import ToolSpec
from naga.tokens import Risk
from naga.v1 import kernel_pb2 as kpb
from naga_core.agent._core import Core
from naga_core.agent._recover import OpenCall, OpenTurn
from naga_core.kernel import KernelError
from naga_core.plugins import PluginHost
from naga_core.workspace import Workspace

#: The one capability whose writes the core captures with an inverse.
_CAPTURED = frozenset({"workspace"})
#: The core's own tools a call in flight at a stop may run again: reads,
#: and memory.write, which adds nothing when the subject already holds the
#: same text (MemoryStore.duplicate) and is resumed with the same arguments.
CORE_REPEATABLE = frozenset({"memory.search", "memory.write", "turn.read_result", "skill.view"})


class Rewind:
    """Decides, for each open turn at start, whether it is re-run, and
    undoes its calls' workspace effects when it is (on the loop, before
    anything is served)."""

    def __init__(self, core: Core, plugins: PluginHost, workspace: Workspace) -> None:
        self._core = core
        self._plugins = plugins
        self._workspace = workspace
        self._specs: dict[str, tuple[ToolSpec, frozenset[str]]] | None = None

    def _spec(self, tool: str) -> tuple[ToolSpec, frozenset[str]] | None:
        """The tool's declaration in the plugin version chosen now (read
        before the plugin host serves: from the catalog and the kernel)."""
        if self._specs is None:
            self._specs = {}
            for name in self._plugins.names():
                installed = self._plugins.selected(name, self._core.kernel)
                if installed is not None:
                    manifest = installed.manifest
                    for spec in manifest.tools:
                        self._specs[spec.name] = (spec, manifest.capabilities)
        return self._specs.get(tool)

    def prepare(self, turn: OpenTurn) -> str | None:
        """None if ``turn`` is re-run (its pending calls' effects undone now,
        named in ``turn.undone``); else the error it ends with. A call whose
        answer is recorded is not run again: the re-run replays its answer
        (``turn.replay``), so only the calls in flight at the stop matter."""
        resumed = turn.why_resumed()
        if resumed is not None:
            return resumed
        if turn.tool_calls and len(turn.calls) < turn.tool_calls:
            return (
                f"the core stopped during this turn after it started {turn.tool_calls} tool "
                "call(s) a start-up image recorded without their tools; it is not run again, "
                "so no tool runs twice: send the message again to go on"
            )
        if turn.unreadable:
            return (
                f"the core stopped during this turn and {turn.unreadable}, so it cannot go "
                "on from there; it is not run again: send the message again to go on"
            )
        calls = sorted(turn.pending, key=lambda c: c.links[-1] if c.links else -1)
        for call in calls:
            why = self.why_not_repeated(call)
            if why is not None:
                return why
        for call in reversed(calls):  # last first
            for link in reversed(call.links):
                why = self._undo(turn, call, link)
                if why is not None:
                    return why
        return None

    def why_not_repeated(self, call: OpenCall) -> str | None:
        """None if ``call`` may run again (after its undo); else why not."""
        if call.tool in CORE_REPEATABLE:
            return None
        found = self._spec(call.tool)
        head = f"the core stopped during tool call {call.call_id} ({call.tool or 'unknown tool'})"
        tail = "it is not run again, so it never runs twice: send the message again to go on"
        if found is None:
            return f"{head}, a tool whose effects Naga does not capture; {tail}"
        spec, capabilities = found
        risk = Risk(int(spec.risk))
        if risk is Risk.R0 or spec.repeatable:
            return None
        if capabilities and capabilities <= _CAPTURED:
            return None
        return (
            f"{head}, a {risk.name} tool whose effects Naga cannot undo (it is neither "
            f"read-only, declared repeatable, nor a captured workspace write); {tail}"
        )

    def _undo(self, turn: OpenTurn, call: OpenCall, link: int) -> str | None:
        """Undo the effect journaled right after ``link``; None if done (or
        nothing to do), else why the turn cannot be re-run."""
        kernel = self._core.kernel
        effect = kernel.effect_at(link + 1)
        blobs = kernel.ledger.read(link).blob_refs
        if effect is None or len(blobs) != 2 or not _made_by(effect, blobs):
            return None  # not journaled: the tree never changed
        do, undo = effect.do[0], effect.undo[0]
        if self._workspace.holds(undo):
            return None  # aborted and compensated: nothing in force
        if not self._workspace.holds(do):
            return (
                f"the core stopped during tool call {call.call_id} ({call.tool}); what its "
                f"effect {link + 1} wrote was changed since, so it is not undone and the turn "
                "is not run again: send the message again to go on"
            )
        description = (
            f"undo of effect {link + 1} (tool call {call.call_id}, {call.tool}) of turn "
            f"{turn.turn_id} in session {turn.session}: the core stopped during the turn, "
            "which runs again"
        )
        try:
            seq = self._core.write(lambda: kernel.revert(link + 1, description=description))
        except KernelError as exc:
            return (
                f"the core stopped during tool call {call.call_id} ({call.tool}) and its "
                f"effect {link + 1} could not be undone ({exc}); the turn is not run again: "
                "send the message again to go on"
            )
        turn.undone.append(f"effect {link + 1} of tool call {call.call_id} ({call.tool}) by {seq}")
        return None


def _made_by(effect: kpb.Effect, blobs: tuple[bytes, ...]) -> bool:
    """Whether ``effect`` is the one workspace change the link names."""
    if effect.form != kpb.EFFECT_FORM_PERFORM or len(effect.do) != 1 or len(effect.undo) != 1:
        return False
    sets = (effect.do[0].args.get("set"), effect.undo[0].args.get("set"))
    return all(
        v is not None and v.WhichOneof("kind") == "raw" and v.raw == b
        for v, b in zip(sets, blobs, strict=True)
    )


__all__ = ["Rewind"]
