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
_APPROVAL = "/naga.v1.ApprovalService/"
_TURN = "/naga.v1.TurnService/"
_MODEL = "/naga.v1.ModelService/"
_TOOL = "/naga.v1.ToolService/"
_WECHAT = "/naga.v1.WechatService/"
_CONSOLE = "/naga.v1.ConsoleService/"
_INSTALL = "/naga.v1.PluginInstallService/"
_SKILL = "/naga.v1.SkillService/"
_JOB = "/naga.v1.JobService/"
_MEMORY = "/naga.v1.MemoryService/"
_ADMIN = "/naga.v1.ConsoleAdminService/"
#: The owner's changes from the console: the owner's CLI, or the gateway
#: carrying the owner's console session in the request, which the handler
#: checks against the console key (naga_core.daemon._console_admin).
_OWNER_OR_CONSOLE = Rule(owner=True, roles=frozenset({GATEWAY}), risk=Risk.R3)

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
    # A step's calls: each is checked as Call checks it, bound to the same session.
    _TOOL + "CallStep": Rule(
        owner=False, roles=frozenset({EXECUTOR}), risk=Risk.R0, session="session"
    ),
    # Approvals of risky tool calls: the owner's CLI, and the gateway for the
    # owner's console (it shows the card to owner peers only).
    _APPROVAL + "List": _read(GATEWAY),
    _APPROVAL + "Decide": Rule(owner=True, roles=frozenset({GATEWAY}), risk=Risk.R3),
    # WeChat bindings are the owner's: a binding lets a WeChat account talk
    # to the agent, and its owner user is trusted as the owner.
    _WECHAT + "Bind": _owner_only(Risk.R3),
    _WECHAT + "List": _read(),
    _WECHAT + "Unbind": _owner_only(Risk.R3),
    # Sending a file to a WeChat user is irreversible: the owner's (the
    # agent's tool for it is not built yet).
    "/naga.v1.WechatMediaService/SendFile": _owner_only(Risk.R3),
    # The console's owner proof (docs/adr/0007-console-owner-proof.md). A
    # login code is the owner's to ask for (its CLI proves itself with the
    # 0600 credential); only the gateway redeems one (that grants owner
    # access to a browser: R4, as its token's ceiling) or checks a session;
    # ending every session is the owner's.
    _CONSOLE + "IssueLogin": _owner_only(Risk.R4),
    _CONSOLE + "RedeemLogin": Rule(owner=False, roles=frozenset({GATEWAY}), risk=Risk.R4),
    _CONSOLE + "CheckSession": Rule(owner=False, roles=frozenset({GATEWAY}), risk=Risk.R0),
    _CONSOLE + "RevokeSessions": _owner_only(Risk.R3),
    # Installing code that will run, and removing it, is the owner's (its
    # CLI showed what the manifest asks and the owner said yes); effects.
    _INSTALL + "Install": _owner_only(Risk.R4),
    _INSTALL + "Remove": _owner_only(Risk.R3),
    # The skill library: reads for the owner and the gateway (the console's
    # skills view); every change is the owner's (each an effect that can be
    # rolled back). The agent writes skills only through the core's own
    # review after a turn, never through an RPC.
    _SKILL + "List": _read(GATEWAY),
    _SKILL + "Show": _read(GATEWAY),
    _SKILL + "Log": _read(GATEWAY),
    _SKILL + "Diff": _read(GATEWAY),
    _SKILL + "Stats": _read(GATEWAY),
    _SKILL + "Import": _owner_only(Risk.R3),
    _SKILL + "Archive": _owner_only(Risk.R2),
    _SKILL + "Restore": _owner_only(Risk.R2),
    _SKILL + "Revert": _owner_only(Risk.R2),
    _SKILL + "Curate": _owner_only(Risk.R2),
    # Scheduled jobs are the owner's: a job acts while the owner is away
    # (the agent makes them through its job.create tool, not these calls).
    # Compiling asks the model, changes nothing; making, changing and
    # running one are effects.
    _JOB + "Compile": _owner_only(Risk.R0),
    _JOB + "Add": _owner_only(Risk.R2),
    _JOB + "List": _owner_only(Risk.R0),
    _JOB + "Get": _owner_only(Risk.R0),
    _JOB + "Pause": _owner_only(Risk.R1),
    _JOB + "Resume": _owner_only(Risk.R2),
    _JOB + "Remove": _owner_only(Risk.R2),
    _JOB + "Run": _owner_only(Risk.R2),
    # Memory is the owner's to read (decrypted) and to forget (a destroyed
    # key cannot come back: R4, docs/design/memory.md); no process role.
    _MEMORY + "List": _read(),
    _MEMORY + "Show": _read(),
    _MEMORY + "Search": _read(),
    _MEMORY + "Forget": _owner_only(Risk.R4),
    _MEMORY + "Distill": _owner_only(Risk.R1),
    # The console's owner pages (docs/adr/0029-console-owner-changes.md).
    _ADMIN + "RenameSession": _OWNER_OR_CONSOLE,
    _ADMIN + "ArchiveSession": _OWNER_OR_CONSOLE,
    _ADMIN + "ReadLog": _OWNER_OR_CONSOLE,
    _ADMIN + "ChangeSetting": _OWNER_OR_CONSOLE,
    _ADMIN + "SetPluginEnabled": _OWNER_OR_CONSOLE,
    _ADMIN + "ListProviders": _OWNER_OR_CONSOLE,
    _ADMIN + "SetDefaultProvider": _OWNER_OR_CONSOLE,
    _ADMIN + "WechatBind": _OWNER_OR_CONSOLE,
    _ADMIN + "WechatList": _OWNER_OR_CONSOLE,
    # Installing code is R4 (as Install): the console shows the consent first.
    _ADMIN + "PreviewInstall": _OWNER_OR_CONSOLE,
    _ADMIN + "InstallPlugin": Rule(owner=True, roles=frozenset({GATEWAY}), risk=Risk.R4),
    # Raising a peer's trust is the owner's (INV-6): the handler admits the
    # gateway only with the owner's console session, then acts as the owner.
    _ADMIN + "SetTrust": _OWNER_OR_CONSOLE,
    # The console's skills view (skills17, ADR 0044): reads, but of the
    # owner's library, so the handler checks the owner's console session too.
    _ADMIN + "ConsoleListSkills": _read(GATEWAY),
    _ADMIN + "ConsoleShowSkill": _read(GATEWAY),
    _ADMIN + "ConsoleSkillLog": _read(GATEWAY),
    # Memory browsed and one item deleted (docs/adr/0045-console-memory-delete.md).
    _ADMIN + "ConsoleListMemory": _OWNER_OR_CONSOLE,
    _ADMIN + "ConsoleDeleteMemory": _OWNER_OR_CONSOLE,
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
