"""The console's skills view (skills17; docs/adr/0044-console-skills-view.md):
the list, one skill's files and its history, read through the core's
ConsoleAdminService with the owner's console session, which the core checks
on every call as for the owner's other pages. Nothing here changes a skill:
changes stay the CLI's (`naga skill ...`)."""

from __future__ import annotations

from typing import Any

from naga.skill_json import skill_summary, skill_version
from naga.v1 import console_admin_pb2 as capb
from naga.v1 import skills_pb2 as skpb
from naga_gateway import _protocol as p
from naga_gateway._core import CorePort

#: A file's text shown at most this long (SKILL.md, a script); the rest is
#: the CLI's (`naga skill export`), as skill.view caps what the model reads.
_MAX_SHOWN_CHARS = 64_000


def _file(f: skpb.SkillFile) -> dict[str, Any]:
    try:
        text: str | None = f.data.decode()
    except UnicodeDecodeError:
        text = None  # an asset: its size only
    return {
        "path": f.path,
        "size": len(f.data),
        "executable": f.executable,
        "text": text[:_MAX_SHOWN_CHARS] if text is not None else None,
        "cut": text is not None and len(text) > _MAX_SHOWN_CHARS,
    }


async def list_skills(core: CorePort, cred: str, params: p.SkillListParams) -> dict[str, Any]:
    req = capb.ConsoleListSkillsRequest(
        console_session=cred,
        list=skpb.ListSkillsRequest(scope=params.scope, archived=params.archived),
    )
    resp = await core.admin("ConsoleListSkills", req, skpb.ListSkillsResponse)
    return {"skills": [skill_summary(s) for s in resp.skills]}


async def show_skill(core: CorePort, cred: str, params: p.SkillParams) -> dict[str, Any]:
    req = capb.ConsoleShowSkillRequest(
        console_session=cred,
        show=skpb.ShowSkillRequest(name=params.name, scope=params.scope, version=params.version),
    )
    resp = await core.admin("ConsoleShowSkill", req, skpb.ShowSkillResponse)
    return {
        "skill": skill_summary(resp.skill),
        "version": skill_version(resp.version),
        "files": [_file(f) for f in resp.files],
    }


async def skill_log(core: CorePort, cred: str, params: p.SkillParams) -> dict[str, Any]:
    req = capb.ConsoleSkillLogRequest(
        console_session=cred, log=skpb.SkillLogRequest(name=params.name, scope=params.scope)
    )
    resp = await core.admin("ConsoleSkillLog", req, skpb.SkillLogResponse)
    return {
        "skill": skill_summary(resp.skill),
        "versions": [skill_version(v) for v in resp.versions],
    }


__all__ = ["list_skills", "show_skill", "skill_log"]
