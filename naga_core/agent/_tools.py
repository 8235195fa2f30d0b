"""The tools a turn may see: those of the enabled plugins its trust's row
of the trust table shows (naga.policy), as the model's ToolSpecs."""

from __future__ import annotations

import json

from naga.plugin import Param, ParamType, ToolSpec
from naga.policy import TrustPolicy
from naga.tokens import Risk
from naga.v1 import model_pb2 as mpb
from naga_core.authz import Grant
from naga_core.plugins import PluginHost

_JSON_TYPES = {
    ParamType.STRING: "string",
    ParamType.INTEGER: "integer",
    ParamType.NUMBER: "number",
    ParamType.BOOLEAN: "boolean",
}


def all_tools(plugins: PluginHost) -> dict[str, ToolSpec]:
    """Every tool of an enabled plugin, by name."""
    out: dict[str, ToolSpec] = {}
    for view in plugins.views():
        if view.enabled and view.installed is not None:
            for tool in view.installed.manifest.tools:
                out[tool.name] = tool
    return out


def visible(plugins: PluginHost, policy: TrustPolicy) -> list[ToolSpec]:
    """The tools a turn under ``policy`` (its trust's row) is shown, by name."""
    found = all_tools(plugins)
    return [found[n] for n in sorted(found) if policy.tool_visible(int(found[n].risk))]


def offered(
    plugins: PluginHost,
    policy: TrustPolicy,
    *,
    owner: bool,
    shipped_max: Risk,
    approve_from: Risk,
) -> list[ToolSpec]:
    """The tools a turn is offered (docs/design/tools.md): those its trust's
    row shows; a shipped plugin's at most ``tools.max_risk``; and to a peer
    below the owner none that would need the owner's approval (it never
    reaches one)."""
    shipped = {
        t.name
        for v in plugins.views()
        if v.enabled and v.installed is not None and v.installed.shipped
        for t in v.installed.manifest.tools
    }
    out: list[ToolSpec] = []
    for tool in visible(plugins, policy):
        risk = Risk(int(tool.risk))
        if tool.name in shipped and risk > shipped_max:
            continue
        if not owner and risk >= approve_from:
            continue
        out.append(tool)
    return out


def model_name(tool: str) -> str:
    """Providers allow letters, digits, '_' and '-' in tool names: '.' is '__'."""
    return tool.replace(".", "__")


def spec_for_model(tool: ToolSpec) -> mpb.ToolSpec:
    return mpb.ToolSpec(
        name=model_name(tool.name),
        description=tool.description,
        parameters_json_schema=json.dumps(_schema(tool.params), separators=(",", ":")),
    )


def _schema(params: tuple[Param, ...]) -> dict[str, object]:
    props: dict[str, object] = {}
    for p in params:
        prop: dict[str, object] = {"type": _JSON_TYPES[p.type]}
        if p.description:
            prop["description"] = p.description
        if p.type is ParamType.STRING:
            prop["maxLength"] = p.max_length
        if p.minimum is not None:
            prop["minimum"] = p.minimum
        if p.maximum is not None:
            prop["maximum"] = p.maximum
        props[p.name] = prop
    schema: dict[str, object] = {"type": "object", "properties": props}
    required = [p.name for p in params if p.required]
    if required:
        schema["required"] = required
    return schema


def refusal_of(plugins: PluginHost, grant: Grant, tool: str) -> str | None:
    """Why a turn under ``grant`` may not call ``tool`` (told to the model),
    or None if it may."""
    spec = all_tools(plugins).get(tool)
    if spec is None:
        return f"there is no tool {tool!r}; use one of the tools you were given"
    risk = Risk(int(spec.risk))
    if risk > grant.risk:
        return (
            f"tool {tool} is not allowed in this session: its risk {risk.name} is above "
            f"the session's ceiling {grant.risk.name} (trust {grant.trust.label}); "
            "answer without it"
        )
    if grant.tools is not None and tool not in grant.tools:
        return f"tool {tool} is not available in this session; answer without it"
    return None


__all__ = ["all_tools", "model_name", "offered", "refusal_of", "spec_for_model", "visible"]
