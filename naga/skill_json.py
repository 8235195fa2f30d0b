"""The JSON shape of a skill's summary and versions (skills.proto), one for
every reader: ``naga skill ... --json`` and the console's skills view
(docs/protocol/websocket.md) show the same fields under the same names."""

from __future__ import annotations

from typing import Any

from naga.v1 import skills_pb2 as skpb


def skill_summary(s: skpb.SkillSummary) -> dict[str, Any]:
    return {
        "scope": s.scope,
        "name": s.name,
        "description": s.description,
        "version": s.version,
        "archived": s.archived,
        "pinned": s.pinned,
        "author": s.author,
        "updated_ns": s.updated_ns,
        "uses": s.uses,
        "last_used_ns": s.last_used_ns,
        "versions": s.versions,
    }


def skill_version(v: skpb.SkillVersion) -> dict[str, Any]:
    return {
        "version": v.version,
        "parents": list(v.parents),
        "author": v.author,
        "reason": v.reason,
        "action": v.action,
        "time_ns": v.time_ns,
        "tree": v.tree,
    }


__all__ = ["skill_summary", "skill_version"]
