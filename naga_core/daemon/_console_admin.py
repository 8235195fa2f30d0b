"""``naga.v1.ConsoleAdminService``: the owner's changes from the console
(proto/naga/v1/console_admin.proto, docs/adr/0029-console-owner-changes.md).

Every method is the owner's. The policy lets the owner credential and the
gateway's token call them; a gateway call is admitted here only with the
owner's console session in the request, checked against the console key
(:meth:`ConsoleLogins.check`), so neither the gateway nor the browser
decides who the owner is. Each change goes where the CLI's goes: settings
through the settings store (its rules), plugins through the host (effects),
the provider through ``model.provider``, trust through the kernel's
SetTrust (as ``naga trust set``), WeChat through the channel.
"""

from __future__ import annotations

import os
import re
import tempfile
import urllib.parse

import trio

from naga.v1 import console_admin_pb2 as capb
from naga.v1 import console_pb2 as cnpb
from naga.v1 import core_pb2 as cpb
from naga.v1 import plugin_install_pb2 as ipb
from naga.v1 import plugin_service_pb2 as spb
from naga.v1 import skills_pb2 as skpb
from naga.v1 import wechat_pb2 as wpb
from naga_core._providers import (
    NoProviderConfigured,
    Providers,
    ProvidersFileError,
    providers_path,
)
from naga_core.agent import SESSION, Agent, Distillations
from naga_core.daemon import _checks, _core_log
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import AsyncUnary, Method, Unary
from naga_core.daemon._console_login import ConsoleLogins
from naga_core.daemon._core import Core
from naga_core.daemon._errors import ConsoleProofRequired, RequestRefused
from naga_core.daemon._install_service import InstallServicer
from naga_core.daemon._kernel_service import (
    KernelServicer,
    check_set_setting,
    check_set_trust,
)
from naga_core.daemon._plugin_service import PluginServicer
from naga_core.daemon._policy import GATEWAY
from naga_core.daemon._rundir import RunDir
from naga_core.daemon._session_meta import SessionMeta, check_title
from naga_core.daemon._skill_service import SkillServicer, check_list, check_named, check_show
from naga_core.daemon._wechat_service import WechatServicer, check_bind
from naga_core.memory import check_subject
from naga_core.plugins import code_hash, consent, read_manifest, unpack

SERVICE = "naga.v1.ConsoleAdminService"
_PLUGIN_WAIT_MS = 20_000
#: The console session credential's longest form (the cookie's value).
_MAX_SESSION_CHARS = 256
_LOCAL = "local"
_MEMORY_ID = re.compile(r"mi-[0-9a-f]{16}")


def _session_field(value: str) -> None:
    _checks.text("console_session", value, max_chars=_MAX_SESSION_CHARS, required=False)


def _session_name(value: str) -> None:
    if not SESSION.fullmatch(value):
        raise RequestRefused.invalid(f"session {_checks.shown(value)} is not a session name")


def check_rename(req: capb.RenameSessionRequest) -> None:
    _session_field(req.console_session)
    _session_name(req.session)
    check_title(req.title)


def check_archive(req: capb.ArchiveSessionRequest) -> None:
    _session_field(req.console_session)
    _session_name(req.session)


def check_log(req: capb.ReadLogRequest) -> None:
    _session_field(req.console_session)
    if req.min_level not in capb.LogLevel.values():
        raise RequestRefused.invalid(f"min_level {req.min_level} is not a log level")
    _checks.text("component", req.component, max_chars=128, required=False)
    if req.limit > _core_log.MAX_LIMIT:
        raise RequestRefused.invalid(
            f"limit {req.limit} is above the maximum of {_core_log.MAX_LIMIT}"
        )
    if req.HasField("before") and req.before < 1:
        raise RequestRefused.invalid("before must be a line number (1 or more)")


def check_change(req: capb.ChangeSettingRequest) -> None:
    _session_field(req.console_session)
    check_set_setting(req.change)


def check_plugin(req: capb.SetPluginEnabledRequest) -> None:
    _session_field(req.console_session)
    _checks.text("name", req.name, max_chars=64)


def check_providers(req: capb.ListProvidersRequest) -> None:
    _session_field(req.console_session)


def check_default(req: capb.SetDefaultProviderRequest) -> None:
    _session_field(req.console_session)
    _checks.text("name", req.name, max_chars=64, required=False)


def check_trust(req: capb.ConsoleSetTrustRequest) -> None:
    _session_field(req.console_session)
    check_set_trust(req.change)


def check_wechat_bind(req: capb.ConsoleWechatBindRequest) -> None:
    _session_field(req.console_session)
    check_bind(req.bind)


def check_wechat_list(req: capb.ConsoleWechatListRequest) -> None:
    _session_field(req.console_session)


def check_skill_list(req: capb.ConsoleListSkillsRequest) -> None:
    _session_field(req.console_session)
    check_list(req.list)


def check_skill_show(req: capb.ConsoleShowSkillRequest) -> None:
    _session_field(req.console_session)
    check_show(req.show)


def check_skill_log(req: capb.ConsoleSkillLogRequest) -> None:
    _session_field(req.console_session)
    check_named(req.log)


def check_list_memory(req: capb.ConsoleListMemoryRequest) -> None:
    _session_field(req.console_session)
    if req.subject:
        why = check_subject(req.subject)
        if why is not None:
            raise RequestRefused.invalid(why)


def check_delete_memory(req: capb.ConsoleDeleteMemoryRequest) -> None:
    _session_field(req.console_session)
    if not _MEMORY_ID.fullmatch(req.id):
        raise RequestRefused.invalid(
            f"id: {_checks.shown(req.id[:40])} is not a memory id (like mi-0123456789abcdef)"
        )


def _source(value: str) -> None:
    _checks.text("source", value, max_chars=4096)
    if not os.path.isabs(value):
        raise RequestRefused.invalid(
            f"source {_checks.shown(value)} must be an absolute path (a folder or archive)"
        )


def check_preview(req: capb.PreviewInstallRequest) -> None:
    _session_field(req.console_session)
    _source(req.source)


def check_install(req: capb.ConsoleInstallRequest) -> None:
    _session_field(req.console_session)
    _source(req.source)
    if len(req.code_hash) != 64 or any(c not in "0123456789abcdef" for c in req.code_hash):
        raise RequestRefused.invalid("code_hash must be the 64 hex digits the preview gave")


def _preview(source: str) -> capb.PreviewInstallResponse:
    """What installing ``source`` asks (off the loop: it reads the code)."""
    with tempfile.TemporaryDirectory(prefix="naga-install-") as staging:
        found = unpack(source, staging)
        manifest = read_manifest(found, source)
        digest = code_hash(found)
    return capb.PreviewInstallResponse(
        name=manifest.name,
        version=manifest.version,
        code_hash=digest,
        consent=consent(manifest, digest, source),
    )


class ConsoleAdminServicer:
    def __init__(
        self,
        core: Core,
        logins: ConsoleLogins,
        agent: Agent,
        meta: SessionMeta,
        *,
        kernel: KernelServicer,
        plugins: PluginServicer,
        wechat: WechatServicer,
        installs: InstallServicer,
        skills: SkillServicer | None = None,
        distillations: Distillations | None = None,
    ) -> None:
        self._core = core
        self._logins = logins
        self._agent = agent
        self._meta = meta
        self._kernel = kernel
        self._plugins = plugins
        self._wechat = wechat
        self._installs = installs
        self._skills = skills
        self._distillations = distillations

    def methods(self) -> list[Method]:
        return [
            Unary("RenameSession", capb.RenameSessionRequest, self.rename, check_rename),
            Unary("ArchiveSession", capb.ArchiveSessionRequest, self.archive, check_archive),
            AsyncUnary("ReadLog", capb.ReadLogRequest, self.read_log, check_log),
            Unary("ChangeSetting", capb.ChangeSettingRequest, self.change_setting, check_change),
            AsyncUnary(
                "SetPluginEnabled", capb.SetPluginEnabledRequest, self.set_plugin, check_plugin
            ),
            Unary("ListProviders", capb.ListProvidersRequest, self.providers, check_providers),
            Unary(
                "SetDefaultProvider",
                capb.SetDefaultProviderRequest,
                self.set_default,
                check_default,
            ),
            AsyncUnary(
                "WechatBind", capb.ConsoleWechatBindRequest, self.wechat_bind, check_wechat_bind
            ),
            Unary("WechatList", capb.ConsoleWechatListRequest, self.wechat_list, check_wechat_list),
            AsyncUnary(
                "PreviewInstall", capb.PreviewInstallRequest, self.preview_install, check_preview
            ),
            AsyncUnary("InstallPlugin", capb.ConsoleInstallRequest, self.install, check_install),
            Unary("SetTrust", capb.ConsoleSetTrustRequest, self.set_trust, check_trust),
            Unary(
                "ConsoleListSkills",
                capb.ConsoleListSkillsRequest,
                self.list_skills,
                check_skill_list,
            ),
            Unary(
                "ConsoleShowSkill", capb.ConsoleShowSkillRequest, self.show_skill, check_skill_show
            ),
            Unary("ConsoleSkillLog", capb.ConsoleSkillLogRequest, self.skill_log, check_skill_log),
            Unary(
                "ConsoleListMemory",
                capb.ConsoleListMemoryRequest,
                self.list_memory,
                check_list_memory,
            ),
            Unary(
                "ConsoleDeleteMemory",
                capb.ConsoleDeleteMemoryRequest,
                self.delete_memory,
                check_delete_memory,
            ),
        ]

    def _owner(self, p: Principal, console_session: str) -> Principal:
        """The owner's CLI, or the gateway carrying the owner's console login."""
        if p.owner:
            return p
        if p.role != GATEWAY:  # the policy admits no other role; said again here
            raise ConsoleProofRequired(f"{p.name} may not change the owner's settings")
        if not console_session:
            raise ConsoleProofRequired(
                "this change is the owner's: the console must be logged in as the owner "
                "(run `naga console` for a login link)"
            )
        if self._logins.check(console_session) != cnpb.CONSOLE_VERDICT_OWNER:
            raise ConsoleProofRequired(
                "the console login is not the owner's now (expired or revoked): "
                "run `naga console` for a new login link"
            )
        return Principal.the_owner()

    # --- sessions ----------------------------------------------------------------------

    def _known(self, session: str) -> None:
        if self._agent.sessions.get(session) is None:
            raise RequestRefused.invalid(f"no session named {session!r}")

    def _session_answer(self, session: str, seq: int | None) -> capb.SessionChangeResponse:
        out = capb.SessionChangeResponse(
            session=session,
            title=self._meta.title(session),
            archived=self._meta.archived(session),
        )
        if seq is not None:
            out.seq = seq
        return out

    def rename(self, p: Principal, req: capb.RenameSessionRequest) -> capb.SessionChangeResponse:
        self._owner(p, req.console_session)
        self._known(req.session)
        seq = self._meta.rename(req.session, check_title(req.title))
        return self._session_answer(req.session, seq)

    def archive(self, p: Principal, req: capb.ArchiveSessionRequest) -> capb.SessionChangeResponse:
        self._owner(p, req.console_session)
        self._known(req.session)
        seq = self._meta.archive(req.session, req.archived)
        out = self._session_answer(req.session, seq)
        if seq is not None and req.archived and self._distillations is not None:
            # Archiving ends the session: its end-of-session distillation
            # (one model call; "nothing" is an answer) runs in the
            # background after this answer (ADR 0050), recorded as
            # memory.distill; a failure is its outcome, never the archive's.
            self._distillations.schedule(req.session)
            out.distilling = True
        return out

    # --- the log -------------------------------------------------------------------------

    async def read_log(self, p: Principal, req: capb.ReadLogRequest) -> capb.ReadLogResponse:
        self._owner(p, req.console_session)
        path = RunDir(self._core.home).log_path
        before = req.before if req.HasField("before") else None
        limit = req.limit or _core_log.DEFAULT_LIMIT

        def read() -> _core_log.LogPage:
            return _core_log.read_page(
                path,
                min_level=req.min_level,
                component=req.component,
                before=before,
                limit=limit,
            )

        page = await trio.to_thread.run_sync(read)
        return capb.ReadLogResponse(
            lines=page.lines,
            more=page.more,
            next_before=page.next_before,
            total=page.total,
            components=page.components,
        )

    # --- settings, plugins, providers ------------------------------------------------------

    def change_setting(
        self, p: Principal, req: capb.ChangeSettingRequest
    ) -> cpb.SetSettingResponse:
        owner = self._owner(p, req.console_session)
        change = req.change
        if change.name == "model.provider" and change.WhichOneof("change") == "text":
            self._check_provider(change.text)
        return self._kernel.set_setting(owner, change)

    async def set_plugin(
        self, p: Principal, req: capb.SetPluginEnabledRequest
    ) -> capb.SetPluginEnabledResponse:
        owner = self._owner(p, req.console_session)
        if req.enabled:
            on = await self._plugins.enable(
                owner, spb.EnablePluginRequest(name=req.name, wait_ms=_PLUGIN_WAIT_MS)
            )
            return capb.SetPluginEnabledResponse(plugin=on.plugin, changed=on.changed)
        off = await self._plugins.disable(owner, spb.DisablePluginRequest(name=req.name))
        return capb.SetPluginEnabledResponse(plugin=off.plugin, changed=off.changed)

    def _check_provider(self, name: str) -> None:
        if name in ("", _LOCAL):
            return
        path = providers_path(self._core.home)
        try:
            names = sorted(Providers.load(self._core.home).by_name)
        except ProvidersFileError as exc:
            raise RequestRefused.invalid(
                f"cannot choose provider {name!r}: {exc.reason} ({path}); fix the file "
                "(`naga doctor` checks it) or choose 'local' for the embedded model"
            ) from None
        if name not in names:
            raise RequestRefused.invalid(
                f"{name!r} is not a provider of {path} "
                f"(it lists: {', '.join(names)}; or 'local' for the embedded model)"
            )

    def _provider_list(self) -> capb.ListProvidersResponse:
        setting = self._core.settings.get_text("model.provider")
        out = capb.ListProvidersResponse(setting=setting)
        try:
            found = Providers.load(self._core.home)
        except ProvidersFileError as exc:
            out.problem = exc.reason
            out.no_file = isinstance(exc, NoProviderConfigured)
            out.in_use = _LOCAL
            return out
        in_use = setting or found.default
        out.in_use = in_use if in_use == _LOCAL or in_use in found.by_name else found.default
        for name, prov in found.by_name.items():
            out.providers.append(
                capb.ProviderInfo(
                    name=name,
                    api=prov.api,
                    host=urllib.parse.urlsplit(prov.base_url).hostname or "",
                    model=prov.model,
                    file_default=name == found.default,
                    in_use=name == out.in_use,
                    context_window=prov.context_window,
                    vision=prov.vision,
                )
            )
        return out

    def providers(self, p: Principal, req: capb.ListProvidersRequest) -> capb.ListProvidersResponse:
        self._owner(p, req.console_session)
        return self._provider_list()

    def set_default(
        self, p: Principal, req: capb.SetDefaultProviderRequest
    ) -> capb.ListProvidersResponse:
        owner = self._owner(p, req.console_session)
        self._check_provider(req.name)
        change = cpb.SetSettingRequest(name="model.provider")
        if req.name:
            change.text = req.name
        else:
            change.reset = True
        self._kernel.set_setting(owner, change)
        return self._provider_list()

    # --- trust ---------------------------------------------------------------------------------

    def set_trust(self, p: Principal, req: capb.ConsoleSetTrustRequest) -> cpb.SetTrustResponse:
        """The CLI's ``naga trust set``: KernelService.SetTrust as the owner,
        so raising a level (INV-6) is allowed and the change is the same
        ledger effect; nothing here decides a level."""
        owner = self._owner(p, req.console_session)
        change = cpb.SetTrustRequest()
        change.CopyFrom(req.change)
        change.by_owner = True
        return self._kernel.set_trust(owner, change)

    # --- memory (memory18, docs/adr/0045-console-memory-delete.md) -------------------------

    def list_memory(
        self, p: Principal, req: capb.ConsoleListMemoryRequest
    ) -> capb.ConsoleListMemoryResponse:
        self._owner(p, req.console_session)
        store = self._agent.memory.store
        return capb.ConsoleListMemoryResponse(
            items=[i.to_proto() for i in store.items(req.subject)],
            subjects=[s for s in store.subjects() if store.items(s)],
        )

    def delete_memory(
        self, p: Principal, req: capb.ConsoleDeleteMemoryRequest
    ) -> capb.ConsoleDeleteMemoryResponse:
        self._owner(p, req.console_session)
        store, core = self._agent.memory.store, self._core
        seq, item = core.write(lambda: store.delete(core.kernel, req.id))
        return capb.ConsoleDeleteMemoryResponse(seq=seq, id=item.id, subject=item.subject)

    # --- WeChat --------------------------------------------------------------------------------

    async def wechat_bind(
        self, p: Principal, req: capb.ConsoleWechatBindRequest
    ) -> wpb.WechatBindResponse:
        owner = self._owner(p, req.console_session)
        return await self._wechat.bind(owner, req.bind)

    def wechat_list(
        self, p: Principal, req: capb.ConsoleWechatListRequest
    ) -> wpb.WechatListResponse:
        owner = self._owner(p, req.console_session)
        return self._wechat.list(owner, wpb.WechatListRequest())

    # --- skills (skills17: the console's read-only view, ADR 0044) ----------------------------

    def _library(self, p: Principal, console_session: str) -> tuple[SkillServicer, Principal]:
        owner = self._owner(p, console_session)
        if self._skills is None:
            raise RequestRefused.invalid("this core runs without a skill library")
        return self._skills, owner

    def list_skills(
        self, p: Principal, req: capb.ConsoleListSkillsRequest
    ) -> skpb.ListSkillsResponse:
        skills, owner = self._library(p, req.console_session)
        return skills.list(owner, req.list)

    def show_skill(self, p: Principal, req: capb.ConsoleShowSkillRequest) -> skpb.ShowSkillResponse:
        skills, owner = self._library(p, req.console_session)
        return skills.show(owner, req.show)

    def skill_log(self, p: Principal, req: capb.ConsoleSkillLogRequest) -> skpb.SkillLogResponse:
        skills, owner = self._library(p, req.console_session)
        return skills.log(owner, req.log)

    # --- installs ------------------------------------------------------------------------------

    async def preview_install(
        self, p: Principal, req: capb.PreviewInstallRequest
    ) -> capb.PreviewInstallResponse:
        self._owner(p, req.console_session)
        return await trio.to_thread.run_sync(_preview, req.source)

    async def install(
        self, p: Principal, req: capb.ConsoleInstallRequest
    ) -> ipb.InstallPluginResponse:
        owner = self._owner(p, req.console_session)
        done = await self._installs.install(
            owner, ipb.InstallPluginRequest(source=req.source, code_hash=req.code_hash)
        )
        return done


__all__ = ["SERVICE", "ConsoleAdminServicer"]
