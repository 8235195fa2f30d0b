"""Which process may call what: one rule per RPC on the core's socket.

Every method the core serves has exactly one :class:`Rule` here (a test
walks the proto descriptors; the core refuses to serve a method without
one, and the authorizer refuses a call to one). A rule says whether the
owner credential may call it, which capability-token roles may, the
operation's risk level (a token's risk ceiling must reach it), and which
request fields name the session the call acts in, the tool it is for and
the budget it spends, so the token's caveats can be checked against them.
docs/design/architecture.md ("Which process may call what") explains each
choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from naga.tokens import Risk

#: Process roles a capability token can be minted for.
GATEWAY = "gateway"
EXECUTOR = "executor"
PLUGIN = "plugin"
ROLES = frozenset({GATEWAY, EXECUTOR, PLUGIN})

_NONE: frozenset[str] = frozenset()
_ANY = ROLES


@dataclass(frozen=True, slots=True)
class Rule:
    """Who may call one RPC. ``session``, ``tool`` and ``amount`` name fields
    of its request message (optional string, optional string, integer)."""

    owner: bool
    roles: frozenset[str]
    risk: Risk
    session: str | None = None
    tool: str | None = None
    amount: str | None = None

    def callers(self) -> str:
        """The callers in words, for refusals: ``"the owner, gateway"``."""
        who = (["the owner"] if self.owner else []) + sorted(self.roles)
        return ", ".join(who) or "nobody"


def _owner_only(risk: Risk) -> Rule:
    return Rule(owner=True, roles=_NONE, risk=risk)


def _read(*roles: str) -> Rule:
    return Rule(owner=True, roles=frozenset(roles), risk=Risk.R0)


_LEDGER = "/naga.v1.LedgerService/"
_KERNEL = "/naga.v1.KernelService/"
_SUPERVISOR = "/naga.v1.SupervisorService/"
_AUTHZ = "/naga.v1.AuthzService/"
_PLUGIN = "/naga.v1.PluginService/"
_TURN = "/naga.v1.TurnService/"
_MODEL = "/naga.v1.ModelService/"
_TOOL = "/naga.v1.ToolService/"

POLICY: Mapping[str, Rule] = {
    # The ledger's read side. The head (size, root, signed checkpoint) tells
    # nothing of the contents: anyone. Records and proofs (which carry record
    # bodies) are the owner's and the gateway's, which filters what peers
    # see; GetRecords cannot filter by kind without breaking its paging, so
    # other roles use Subscribe, which is narrowed to the kinds their role
    # may see (VISIBLE_KINDS).
    _LEDGER + "GetHead": _read(*_ANY),
    _LEDGER + "GetRecords": _read(GATEWAY),
    _LEDGER + "ProveInclusion": _read(GATEWAY),
    _LEDGER + "ProveConsistency": _read(GATEWAY),
    _LEDGER + "Subscribe": _read(*_ANY),
    # Blobs hold the full model requests and answers of every session: the
    # owner's alone (`naga replay export`), not the gateway's, which shows
    # peers only what it filters from records.
    _LEDGER + "GetBlob": _read(),
    # The kernel: reads for the gateway (it derives trust and shows history
    # to the owner's console); settings the agent loop needs for any role;
    # every write and rollback is the owner's (INV-6: privileges are raised
    # and history rewritten only by the owner).
    _KERNEL + "History": _read(GATEWAY),
    # The owner's console reaches Rollback through the gateway ("undo to
    # here"); only the owner's own credential may assert by_owner, so a
    # rollback that would raise a privilege is refused there (INV-6).
    _KERNEL + "Rollback": Rule(owner=True, roles=frozenset({GATEWAY}), risk=Risk.R4),
    _KERNEL + "GetSetting": _read(*_ANY),
    _KERNEL + "SetSetting": _owner_only(Risk.R3),
    _KERNEL + "ListSettings": _read(GATEWAY),
    _KERNEL + "GetTrust": _read(GATEWAY),
    _KERNEL + "SetTrust": _owner_only(Risk.R3),
    _KERNEL + "ListTrust": _read(GATEWAY),
    # The supervisor: whether the core is up is anyone's question; stopping
    # it, and restarting its gateway (which drops every console connection),
    # is the owner's.
    _SUPERVISOR + "Status": _read(*_ANY),
    _SUPERVISOR + "Shutdown": _owner_only(Risk.R4),
    _SUPERVISOR + "RestartGateway": _owner_only(Risk.R4),
    # Tokens. Minting and revoking are the owner's (the supervisor acts as
    # the owner). Narrowing one's own token for a sub-task and spending
    # one's budget are the agent executor's: it runs the sub-agents and
    # makes the model calls. Inspecting a token is anyone's: whoever holds
    # its bytes holds its rights anyway.
    _AUTHZ + "Mint": _owner_only(Risk.R4),
    _AUTHZ + "Revoke": _owner_only(Risk.R3),
    _AUTHZ + "Spawn": Rule(
        owner=False, roles=frozenset({EXECUTOR}), risk=Risk.R1, session="session"
    ),
    _AUTHZ + "Spend": Rule(
        owner=False,
        roles=frozenset({EXECUTOR}),
        risk=Risk.R1,
        session="session",
        tool="tool",
        amount="amount",
    ),
    _AUTHZ + "Inspect": _read(*_ANY),
    # Plugins. Which are installed is the owner's console's business (the
    # gateway shows it); hot plug is the owner's (each is an effect that can
    # be rolled back). A tool call is the owner's (the CLI) and the agent
    # executor's, for the tools its token lists; the risk of the tool itself
    # is checked against the token's ceiling when the call is made.
    _PLUGIN + "List": _read(GATEWAY),
    _PLUGIN + "Enable": _owner_only(Risk.R3),
    _PLUGIN + "Disable": _owner_only(Risk.R3),
    _PLUGIN + "Replace": _owner_only(Risk.R3),
    _PLUGIN + "Invoke": Rule(owner=True, roles=frozenset({EXECUTOR}), risk=Risk.R0, tool="tool"),
    # Turns: the owner's CLI and the gateway, which carries every channel's
    # messages in and filters what each peer sees; a gateway token bound to
    # a session reaches only that session.
    _TURN + "Run": Rule(owner=True, roles=frozenset({GATEWAY}), risk=Risk.R1, session="session"),
    _TURN + "Steer": Rule(owner=True, roles=frozenset({GATEWAY}), risk=Risk.R1, session="session"),
    _TURN + "Abort": Rule(owner=True, roles=frozenset({GATEWAY}), risk=Risk.R1, session="session"),
    _TURN + "ListSessions": _read(GATEWAY),
    _TURN + "History": Rule(
        owner=True, roles=frozenset({GATEWAY}), risk=Risk.R0, session="session"
    ),
    # The agent executor's calls, with the turn's token only (bound to the
    # turn's session). The tool's own risk and visibility are checked in the
    # handler against the token, so that a refusal is an answer the model
    # reads and the turn goes on, not a status that ends it (nor a
    # violation recorded against the token: the model, not the executor,
    # chose the tool).
    _MODEL + "Complete": Rule(
        owner=False, roles=frozenset({EXECUTOR}), risk=Risk.R0, session="session"
    ),
    _TOOL + "Call": Rule(owner=False, roles=frozenset({EXECUTOR}), risk=Risk.R0, session="session"),
}

#: Record kinds a Subscribe stream shows each token role (None: every kind).
#: The gateway sees everything: it is the visibility filter for peers (SPEC
#: section 1). Executors and plugins see no record yet: every kind written
#: today (kernel effects: settings, trust, tokens, budgets) is the owner's
#: business; session-scoped trace kinds will be added here with the executor.
VISIBLE_KINDS: Mapping[str, frozenset[str] | None] = {
    GATEWAY: None,
    EXECUTOR: frozenset(),
    PLUGIN: frozenset(),
}


def rule_for(method: str) -> Rule | None:
    """The rule of ``method`` (``/naga.v1.Service/Method``), None if it has none."""
    return POLICY.get(method)


__all__ = [
    "EXECUTOR",
    "GATEWAY",
    "PLUGIN",
    "POLICY",
    "ROLES",
    "VISIBLE_KINDS",
    "Rule",
    "rule_for",
]
