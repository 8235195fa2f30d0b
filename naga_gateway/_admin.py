"""The owner's changes from the console (docs/adr/0029-console-owner-changes.md):
each method's params turned into a ConsoleAdminService request carrying the
owner's console session, and the core's answer into the JSON the console
shows.

The gateway refuses a peer below owner before it asks (``_methods``), but that
is a courtesy: the core checks the session credential itself on every call,
so a gateway that forgot, or a forged cookie, changes nothing.
"""

from __future__ import annotations

from typing import Any

import segno

from naga.v1 import console_admin_pb2 as capb
from naga.v1 import core_pb2 as cpb
from naga.v1 import plugin_install_pb2 as ipb
from naga.v1 import wechat_pb2 as wpb
from naga_gateway import _pages
from naga_gateway import _protocol as p
from naga_gateway._core import CorePort

_LEVELS = {
    "debug": capb.LOG_LEVEL_DEBUG,
    "info": capb.LOG_LEVEL_INFO,
    "warning": capb.LOG_LEVEL_WARNING,
    "error": capb.LOG_LEVEL_ERROR,
    "critical": capb.LOG_LEVEL_CRITICAL,
}
_LEVEL_NAMES = {v: k for k, v in _LEVELS.items()}
_BINDING_STATES = {
    wpb.WECHAT_BINDING_STATUS_ACTIVE: "active",
    wpb.WECHAT_BINDING_STATUS_PAUSED: "paused",
}


def _session_change(resp: capb.SessionChangeResponse) -> dict[str, Any]:
    return {
        "session": resp.session,
        "title": resp.title,
        "archived": resp.archived,
        "seq": resp.seq if resp.HasField("seq") else None,
        # Archiving ends a session; its distillation runs in the core's
        # background (ADR 0050), its outcome a memory.distill record.
        "distilling": resp.distilling,
    }


async def rename(core: CorePort, cred: str, params: p.RenameParams) -> dict[str, Any]:
    req = capb.RenameSessionRequest(
        console_session=cred, session=params.session, title=params.title
    )
    return _session_change(await core.admin("RenameSession", req, capb.SessionChangeResponse))


async def archive(core: CorePort, cred: str, params: p.ArchiveParams) -> dict[str, Any]:
    req = capb.ArchiveSessionRequest(
        console_session=cred, session=params.session, archived=params.archived
    )
    return _session_change(await core.admin("ArchiveSession", req, capb.SessionChangeResponse))


async def log(core: CorePort, cred: str, params: p.LogParams) -> dict[str, Any]:
    req = capb.ReadLogRequest(
        console_session=cred,
        min_level=_LEVELS.get(params.level or "", capb.LOG_LEVEL_UNSPECIFIED),
        component=params.component,
        limit=params.limit,
    )
    if params.before is not None:
        req.before = params.before
    resp = await core.admin("ReadLog", req, capb.ReadLogResponse)
    return {
        "lines": [
            {
                "number": line.number,
                "time": line.time,
                "level": _LEVEL_NAMES.get(line.level, ""),
                "component": line.component,
                "message": line.message,
            }
            for line in resp.lines
        ],
        "more": resp.more,
        "next_before": resp.next_before if resp.more else None,
        "total": resp.total,
        "components": list(resp.components),
    }


async def set_setting(core: CorePort, cred: str, params: p.SettingParams) -> dict[str, Any]:
    change = cpb.SetSettingRequest(name=params.name)
    if params.reset:
        change.reset = True
    else:
        change.text = params.value
    req = capb.ChangeSettingRequest(console_session=cred, change=change)
    resp = await core.admin("ChangeSetting", req, cpb.SetSettingResponse)
    (row,) = _pages.settings(cpb.ListSettingsResponse(settings=[resp.setting]))["settings"]
    return {"setting": row, "seq": resp.seq if resp.HasField("seq") else None}


async def set_plugin(core: CorePort, cred: str, params: p.PluginParams) -> dict[str, Any]:
    req = capb.SetPluginEnabledRequest(
        console_session=cred, name=params.name, enabled=params.enabled
    )
    resp = await core.admin("SetPluginEnabled", req, capb.SetPluginEnabledResponse)
    (row,) = _pages.plugins_of([resp.plugin])
    return {"plugin": row, "changed": resp.changed}


async def preview_install(core: CorePort, cred: str, params: p.PreviewParams) -> dict[str, Any]:
    req = capb.PreviewInstallRequest(console_session=cred, source=params.source)
    resp = await core.admin("PreviewInstall", req, capb.PreviewInstallResponse)
    return {
        "name": resp.name,
        "version": resp.version,
        "code_hash": resp.code_hash,
        "consent": list(resp.consent),
    }


async def install(core: CorePort, cred: str, params: p.InstallParams) -> dict[str, Any]:
    req = capb.ConsoleInstallRequest(
        console_session=cred, source=params.source, code_hash=params.code_hash
    )
    resp = await core.admin("InstallPlugin", req, ipb.InstallPluginResponse)
    return {
        "name": resp.name,
        "version": resp.version,
        "directory": resp.directory,
        "seq": resp.seq,
        "previous_versions": list(resp.previous_versions),
        "restart_needed": resp.restart_needed,
    }


def _providers(resp: capb.ListProvidersResponse) -> dict[str, Any]:
    return {
        "providers": [
            {
                "name": x.name,
                "api": x.api,
                "host": x.host,
                "model": x.model,
                "file_default": x.file_default,
                "in_use": x.in_use,
                "context_window": x.context_window,
                "vision": x.vision,
            }
            for x in resp.providers
        ],
        "problem": resp.problem,
        "no_file": resp.no_file,
        "setting": resp.setting,
        "in_use": resp.in_use,
    }


async def providers(core: CorePort, cred: str, _params: p.NoParams) -> dict[str, Any]:
    req = capb.ListProvidersRequest(console_session=cred)
    return _providers(await core.admin("ListProviders", req, capb.ListProvidersResponse))


async def set_provider(core: CorePort, cred: str, params: p.ProviderParams) -> dict[str, Any]:
    req = capb.SetDefaultProviderRequest(console_session=cred, name=params.name)
    return _providers(await core.admin("SetDefaultProvider", req, capb.ListProvidersResponse))


_TRUST_LEVELS = {
    "untrusted": cpb.TRUST_LEVEL_UNTRUSTED,
    "guest": cpb.TRUST_LEVEL_GUEST,
    "known": cpb.TRUST_LEVEL_KNOWN,
    "owner": cpb.TRUST_LEVEL_OWNER,
}


async def set_trust(core: CorePort, cred: str, params: p.TrustParams) -> dict[str, Any]:
    change = cpb.SetTrustRequest(
        peer=params.peer, level=_TRUST_LEVELS[params.level], reason=params.reason
    )
    req = capb.ConsoleSetTrustRequest(console_session=cred, change=change)
    resp = await core.admin("SetTrust", req, cpb.SetTrustResponse)
    (row,) = _pages.trust(cpb.ListTrustResponse(entries=[resp.entry]))["peers"]
    return {"peer": row, "seq": resp.seq if resp.HasField("seq") else None}


_MEMORY_LAYERS = {1: "episodic", 2: "semantic"}


async def memory(core: CorePort, cred: str, params: p.MemoryListParams) -> dict[str, Any]:
    req = capb.ConsoleListMemoryRequest(console_session=cred, subject=params.subject)
    resp = await core.admin("ConsoleListMemory", req, capb.ConsoleListMemoryResponse)
    return {
        "items": [
            {
                "id": i.id,
                "subject": i.subject,
                "layer": _MEMORY_LAYERS.get(i.layer, ""),
                "text": i.text,
                "forgotten": i.forgotten,
                "session": i.session,
                "writer_trust": i.writer_trust,
                "created_ns": i.created_ns,
                "seq": i.seq,
            }
            for i in resp.items
        ],
        "subjects": list(resp.subjects),
    }


async def delete_memory(core: CorePort, cred: str, params: p.MemoryDeleteParams) -> dict[str, Any]:
    req = capb.ConsoleDeleteMemoryRequest(console_session=cred, id=params.id)
    resp = await core.admin("ConsoleDeleteMemory", req, capb.ConsoleDeleteMemoryResponse)
    return {"id": resp.id, "subject": resp.subject, "seq": resp.seq}


def qr_rows(url: str) -> list[str]:
    """The QR code of ``url`` as rows of ``0``/``1`` (dark), drawn by segno
    as ``naga wechat bind`` draws it; the page paints the cells."""
    code = segno.make(url, error="m")
    return ["".join("1" if cell else "0" for cell in row) for row in code.matrix]


def _binding(b: wpb.WechatBinding) -> dict[str, Any]:
    return {
        "bot_id": b.bot_id,
        "owner_user_id": b.owner_user_id,
        "status": _BINDING_STATES.get(b.status, "unknown"),
        "detail": b.detail,
        "since_ns": b.since_ns,
        "received": b.received,
        "sent": b.sent,
        "last_error": b.last_error,
        "polling": b.polling,
    }


async def wechat_bind(core: CorePort, cred: str, params: p.WechatBindParams) -> dict[str, Any]:
    bind = wpb.WechatBindRequest(
        login_id=params.login_id, verify_code=params.verify_code, wait_ms=params.wait_ms
    )
    req = capb.ConsoleWechatBindRequest(console_session=cred, bind=bind)
    resp = await core.admin("WechatBind", req, wpb.WechatBindResponse)
    return {
        "login_id": resp.login_id,
        "status": resp.status,
        "url": resp.url,
        "qr": qr_rows(resp.url) if resp.url else None,
        "detail": resp.detail,
        "binding": _binding(resp.binding) if resp.HasField("binding") else None,
    }


async def wechat_list(core: CorePort, cred: str, _params: p.NoParams) -> dict[str, Any]:
    req = capb.ConsoleWechatListRequest(console_session=cred)
    resp = await core.admin("WechatList", req, wpb.WechatListResponse)
    return {"bindings": [_binding(b) for b in resp.bindings]}


__all__ = [
    "archive",
    "delete_memory",
    "memory",
    "install",
    "preview_install",
    "log",
    "providers",
    "qr_rows",
    "rename",
    "set_plugin",
    "set_provider",
    "set_setting",
    "wechat_bind",
    "wechat_list",
]
