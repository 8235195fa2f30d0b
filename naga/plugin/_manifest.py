"""A plugin's manifest (``plugin.toml``): validated once, at the boundary,
into frozen plain classes.

The file is TOML (docs/design/plugins.md shows one in full). Pydantic checks
it field by field, strictly (no coercion: ``risk = 2`` is not ``"R2"``), and
every problem is reported with its place (``tools[1].params.text.type``), all
at once. What comes out is :class:`Manifest`, which both sides share: the
core installs and supervises by it, the plugin SDK serves by it, and the
Hello carries it (:meth:`Manifest.to_proto`) so the core can check the
plugin runs the manifest it installed.
"""

from __future__ import annotations

import enum
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from naga.constants import (
    PLUGIN_MAX_ARGUMENTS_CHARS,
    PLUGIN_MAX_NAME_CHARS,
    TOKEN_MAX_TOOL_NAME_CHARS,
    TOKEN_MAX_TOOLS,
)
from naga.plugin.errors import ManifestInvalid
from naga.v1 import plugin_pb2 as pb

K = TypeVar("K")

#: The largest manifest file read.
MAX_MANIFEST_BYTES = 64 << 10
#: Capabilities a manifest may ask for: "core" (the core's socket and a
#: token); "egress_proxy" (no network of its own, its egress only through
#: the core's CONNECT proxy, naga_core.egress); "workspace" (the owner's
#: workspace, read-only; its results may stage writes the core captures,
#: docs/design/tools.md); "shell" (its tool plans a command the core runs
#: in a sandbox of its own over a staged copy of the workspace).
CAPABILITIES = frozenset({"core", "egress_proxy", "workspace", "shell"})
_Capability = Literal["core", "egress_proxy", "workspace", "shell"]
#: A string parameter's length limit when the manifest gives none.
DEFAULT_MAX_LENGTH = 4096

# Anchored: pydantic searches a pattern, it does not match it whole.
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
PARAM_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
VERSION = re.compile(r"^(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})$")
ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
HOST = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|[0-9a-fA-F:.]+)$")
#: The rule behind each pattern, in words, for error messages.
_RULES = {
    NAME.pattern: "lowercase letters, digits and '_', starting with a letter (e.g. 'notes')",
    TOOL_NAME.pattern: "dotted lowercase words (e.g. 'notes.write')",
    VERSION.pattern: "MAJOR.MINOR.PATCH (e.g. '1.0.0')",
    ENTRY.pattern: "'package.module:function' (e.g. 'naga_plugins.examples.notes:main')",
    HOST.pattern: "a host name or an IP address",
}


class PluginKind(enum.Enum):
    CHANNEL = "channel"
    MODEL_PROVIDER = "model_provider"
    TOOL = "tool"


class ToolRisk(enum.IntEnum):
    """R0 (read-only) .. R4 (destructive), SPEC section 4."""

    R0 = 0
    R1 = 1
    R2 = 2
    R3 = 3
    R4 = 4


class ParamType(enum.Enum):
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: ParamType
    required: bool
    description: str
    #: Strings only: most characters.
    max_length: int
    #: Integers and numbers: inclusive bounds.
    minimum: float | None
    maximum: float | None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    risk: ToolRisk
    params: tuple[Param, ...]
    #: Declared safe to run again when the core stopped during a call of it
    #: (docs/design/plugins.md, "repeatable"): such a call in flight at a
    #: crash is re-run by the next start instead of ending its turn.
    repeatable: bool = False

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(frozen=True, slots=True)
class EgressHost:
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Limits:
    """What the plugin asks to be held to; the core applies the lower of
    these and its own ceilings. ``None``: the core's default."""

    memory_bytes: int | None
    call_timeout_s: float | None
    max_concurrent_calls: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """A validated manifest. Build with :meth:`parse`, :meth:`load` or
    :meth:`from_proto`."""

    name: str
    version: str
    kind: PluginKind
    description: str
    entry: str
    tools: tuple[ToolSpec, ...]
    capabilities: frozenset[str]
    egress: tuple[EgressHost, ...]
    limits: Limits

    @classmethod
    def parse(
        cls, text: str, *, source: str = "plugin.toml", local_egress: bool = False
    ) -> Manifest:
        """Validate TOML text; :class:`ManifestInvalid` lists every problem.
        Egress to this machine or a private network is refused unless
        ``local_egress`` (only for what the owner configured: the core's
        own provider manifest from providers.json, a configured root)."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ManifestInvalid(source, [f"not valid TOML: {exc}"]) from None
        return cls.from_mapping(data, source=source, local_egress=local_egress)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, local_egress: bool = False) -> Manifest:
        """Read and validate the manifest file at ``path`` (see :meth:`parse`)."""
        source = os.fspath(path)
        try:
            with open(source, "rb") as f:
                raw = f.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise ManifestInvalid(source, [f"cannot read it: {exc.strerror or exc}"]) from None
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ManifestInvalid(source, [f"larger than {MAX_MANIFEST_BYTES} bytes"])
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestInvalid(source, [f"not UTF-8: {exc}"]) from None
        return cls.parse(text, source=source, local_egress=local_egress)

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, object], *, source: str, local_egress: bool = False
    ) -> Manifest:
        try:
            model = _ManifestModel.model_validate(dict(data), context={_LOCAL_EGRESS: local_egress})
        except ValidationError as exc:
            raise ManifestInvalid(source, _problems(exc)) from None
        return model.to_manifest()

    @classmethod
    def from_proto(
        cls, msg: pb.PluginManifest, *, source: str = "Hello", local_egress: bool = False
    ) -> Manifest:
        """The manifest a plugin sent, validated by the same rules as a file."""
        try:
            data = _proto_to_mapping(msg)
        except ValueError as exc:
            raise ManifestInvalid(source, [str(exc)]) from None
        return cls.from_mapping(data, source=source, local_egress=local_egress)

    def to_proto(self) -> pb.PluginManifest:
        limits = pb.PluginLimits(max_concurrent_calls=self.limits.max_concurrent_calls)
        if self.limits.memory_bytes is not None:
            limits.memory_bytes = self.limits.memory_bytes
        if self.limits.call_timeout_s is not None:
            limits.call_timeout_ms = round(self.limits.call_timeout_s * 1000)
        return pb.PluginManifest(
            name=self.name,
            version=self.version,
            kind=_KIND_TO_PROTO[self.kind],
            description=self.description,
            entry=self.entry,
            tools=[_tool_to_proto(t) for t in self.tools],
            capabilities=sorted(self.capabilities),
            egress=[pb.EgressHost(host=e.host, port=e.port) for e in self.egress],
            limits=limits,
        )

    @property
    def version_key(self) -> tuple[int, int, int]:
        major, minor, patch = (int(p) for p in self.version.split("."))
        return major, minor, patch

    @property
    def max_risk(self) -> ToolRisk:
        return max((t.risk for t in self.tools), default=ToolRisk.R0)

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


# --- the boundary: pydantic models of the TOML document --------------------------------

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)
_Text = Annotated[str, Field(max_length=1000)]


class _ParamModel(BaseModel):
    model_config = _STRICT

    type: Literal["string", "integer", "number", "boolean"]
    required: bool = True
    description: _Text = ""
    max_length: Annotated[int, Field(ge=1, le=PLUGIN_MAX_ARGUMENTS_CHARS)] | None = None
    minimum: float | None = None
    maximum: float | None = None

    @model_validator(mode="after")
    def _consistent(self) -> _ParamModel:
        if self.max_length is not None and self.type != "string":
            raise ValueError(f"max_length applies to strings only, not to {self.type}")
        bounded = self.minimum is not None or self.maximum is not None
        if bounded and self.type not in ("integer", "number"):
            raise ValueError(f"minimum and maximum apply to numbers only, not to {self.type}")
        for bound in (self.minimum, self.maximum):
            if bound is not None and not math.isfinite(bound):
                raise ValueError("minimum and maximum must be finite")
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"minimum {self.minimum} is above maximum {self.maximum}")
        return self


class _ToolModel(BaseModel):
    model_config = _STRICT

    name: Annotated[str, Field(max_length=TOKEN_MAX_TOOL_NAME_CHARS, pattern=TOOL_NAME.pattern)]
    description: Annotated[str, Field(min_length=1, max_length=1000)]
    risk: Literal["R0", "R1", "R2", "R3", "R4"]
    params: dict[str, _ParamModel] = Field(default_factory=dict[str, _ParamModel], max_length=32)
    repeatable: bool = False

    @model_validator(mode="after")
    def _param_names(self) -> _ToolModel:
        for name in self.params:
            if len(name) > 64 or not PARAM_NAME.fullmatch(name):
                raise ValueError(f"parameter name {name!r} must match [a-z][a-z0-9_]*")
        return self


class _EgressModel(BaseModel):
    model_config = _STRICT

    host: Annotated[str, Field(min_length=1, max_length=253, pattern=HOST.pattern)]
    port: Annotated[int, Field(ge=1, le=65535)]

    @model_validator(mode="after")
    def _not_local(self, info: ValidationInfo) -> _EgressModel:
        context: object = info.context
        if isinstance(context, dict) and cast("dict[str, object]", context).get(_LOCAL_EGRESS):
            return self
        why = local_destination(self.host, self.port)
        if why:
            raise ValueError(why)
        return self


#: The WebChat gateway's default port (SPEC 1). The sandbox holds a
#: plugin's connections to its declared *ports* (Landlock cannot name
#: hosts), so a plugin declaring it anywhere could reach the local console.
GATEWAY_PORT = 18789
_LOCAL_EGRESS = "local_egress"


def local_destination(host: str, port: int) -> str:
    """Why egress to ``host:port`` reaches this machine or its private
    network (empty when it does not, as far as the name says)."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return (
            f"egress to {host} is this machine (loopback): a plugin may not reach the "
            "core's gateway or other local services"
        )
    if port == GATEWAY_PORT:
        return (
            f"egress port {port} is the WebChat gateway's: the sandbox holds plugins to "
            "ports, so it would reach the local console"
        )
    try:
        ip = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return ""
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    ip = mapped or ip
    if ip.is_loopback or ip.is_unspecified:
        return (
            f"egress to {host} is this machine (loopback): a plugin may not reach the "
            "core's gateway or other local services"
        )
    if ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved:
        return (
            f"egress to {host} is a private or link-local address: a plugin may reach "
            "only public hosts, not this machine's network"
        )
    return ""


class _LimitsModel(BaseModel):
    model_config = _STRICT

    memory_mib: Annotated[int, Field(ge=16, le=4096)] | None = None
    call_timeout_s: Annotated[float, Field(gt=0, le=600)] | None = None
    max_concurrent_calls: Annotated[int, Field(ge=1, le=64)] = 4


class _ManifestModel(BaseModel):
    model_config = _STRICT

    name: Annotated[str, Field(max_length=PLUGIN_MAX_NAME_CHARS, pattern=NAME.pattern)]
    version: Annotated[str, Field(max_length=32, pattern=VERSION.pattern)]
    kind: Literal["channel", "model_provider", "tool"]
    description: Annotated[str, Field(min_length=1, max_length=1000)]
    entry: Annotated[str, Field(max_length=200, pattern=ENTRY.pattern)]
    capabilities: list[_Capability] = Field(default_factory=list[_Capability])
    egress: list[_EgressModel] = Field(default_factory=list[_EgressModel], max_length=16)
    limits: _LimitsModel = Field(default_factory=_LimitsModel)
    tools: list[_ToolModel] = Field(default_factory=list[_ToolModel], max_length=TOKEN_MAX_TOOLS)

    @model_validator(mode="after")
    def _tools(self) -> _ManifestModel:
        if self.kind == "tool" and not self.tools:
            raise ValueError("a tool plugin must declare at least one [[tools]] entry")
        seen: set[str] = set()
        for tool in self.tools:
            if tool.name in seen:
                raise ValueError(f"tool {tool.name!r} is declared twice")
            seen.add(tool.name)
            if tool.name != self.name and not tool.name.startswith(self.name + "."):
                raise ValueError(
                    f"tool {tool.name!r} must be named after its plugin: "
                    f"{self.name!r} or {self.name + '.<name>'!r}"
                )
        if len(set(self.capabilities)) != len(self.capabilities):
            raise ValueError("a capability is listed twice")
        for tool in self.tools:
            if tool.repeatable and self.kind != "tool":
                raise ValueError(
                    f"tool {tool.name!r}: repeatable applies to a tool plugin's tools only"
                )
            captured = {"shell", "workspace"} & set(self.capabilities)
            if tool.repeatable and captured:
                raise ValueError(
                    f"tool {tool.name!r}: repeatable cannot be declared by a plugin with the "
                    "shell or workspace capability: the core runs or captures those effects "
                    "itself and decides whether a call may run again"
                )
        return self

    def to_manifest(self) -> Manifest:
        limits = self.limits
        return Manifest(
            name=self.name,
            version=self.version,
            kind=PluginKind(self.kind),
            description=self.description,
            entry=self.entry,
            tools=tuple(_tool(t) for t in self.tools),
            capabilities=frozenset(self.capabilities),
            egress=tuple(EgressHost(e.host, e.port) for e in self.egress),
            limits=Limits(
                memory_bytes=None if limits.memory_mib is None else limits.memory_mib << 20,
                call_timeout_s=limits.call_timeout_s,
                max_concurrent_calls=limits.max_concurrent_calls,
            ),
        )


def _tool(model: _ToolModel) -> ToolSpec:
    params = tuple(
        Param(
            name=name,
            type=ParamType(p.type),
            required=p.required,
            description=p.description,
            max_length=p.max_length or DEFAULT_MAX_LENGTH,
            minimum=p.minimum,
            maximum=p.maximum,
        )
        for name, p in model.params.items()
    )
    return ToolSpec(
        model.name, model.description, ToolRisk[model.risk], params, repeatable=model.repeatable
    )


def _problems(exc: ValidationError) -> list[str]:
    """One line per error: where (``tools[0].risk``), what, and what was there."""
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        where = ""
        for part in err["loc"]:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else part)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            lines.append(f"{where}: is required")
        elif err["type"] == "extra_forbidden":
            lines.append(f"{where}: is not a manifest field")
        elif err["type"] == "string_pattern_mismatch":
            ctx = err.get("ctx") or {}
            rule = _RULES.get(str(ctx.get("pattern")), "the required form")
            lines.append(f"{where}: must be {rule} (got {err['input']!r})")
        elif err["type"].startswith("model_") or err["type"] == "value_error":
            lines.append(f"{where or 'manifest'}: {message}")
        else:
            shown = repr(err["input"])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            lines.append(f"{where}: {message} (got {shown})")
    return lines


# --- proto -------------------------------------------------------------------------------

_KIND_TO_PROTO = {
    PluginKind.CHANNEL: pb.PLUGIN_KIND_CHANNEL,
    PluginKind.MODEL_PROVIDER: pb.PLUGIN_KIND_MODEL_PROVIDER,
    PluginKind.TOOL: pb.PLUGIN_KIND_TOOL,
}
_KIND_FROM_PROTO = {v: k.value for k, v in _KIND_TO_PROTO.items()}
_TYPE_TO_PROTO = {
    ParamType.STRING: pb.PARAM_TYPE_STRING,
    ParamType.INTEGER: pb.PARAM_TYPE_INTEGER,
    ParamType.NUMBER: pb.PARAM_TYPE_NUMBER,
    ParamType.BOOLEAN: pb.PARAM_TYPE_BOOLEAN,
}
_TYPE_FROM_PROTO = {v: k.value for k, v in _TYPE_TO_PROTO.items()}


def risk_to_proto(risk: ToolRisk) -> pb.ToolRisk.ValueType:
    return pb.ToolRisk.Value(f"TOOL_RISK_R{int(risk)}")


def risk_from_proto(value: pb.ToolRisk.ValueType) -> ToolRisk:
    if not pb.TOOL_RISK_R0 <= value <= pb.TOOL_RISK_R4:
        raise ValueError(f"risk {value} is not one of R0..R4")
    return ToolRisk(int(value) - 1)


def kind_to_proto(kind: PluginKind) -> pb.PluginKind.ValueType:
    return _KIND_TO_PROTO[kind]


def _tool_to_proto(tool: ToolSpec) -> pb.ToolDescriptor:
    params: list[pb.ToolParam] = []
    for p in tool.params:
        msg = pb.ToolParam(
            name=p.name,
            type=_TYPE_TO_PROTO[p.type],
            required=p.required,
            description=p.description,
            max_length=p.max_length if p.type is ParamType.STRING else 0,
        )
        if p.minimum is not None:
            msg.minimum = p.minimum
        if p.maximum is not None:
            msg.maximum = p.maximum
        params.append(msg)
    return pb.ToolDescriptor(
        name=tool.name,
        description=tool.description,
        risk=risk_to_proto(tool.risk),
        params=params,
        repeatable=tool.repeatable,
    )


def _named(table: Mapping[K, str], value: K, what: str) -> str:
    found = table.get(value)
    if found is None:
        raise ValueError(f"{what}: {value} is not a known value")
    return found


def _proto_to_mapping(msg: pb.PluginManifest) -> dict[str, object]:
    """The TOML-shaped mapping of a manifest message (so the same model checks it)."""
    tools: list[dict[str, object]] = []
    for t in msg.tools:
        params: dict[str, object] = {}
        for p in t.params:
            if p.name in params:
                raise ValueError(f"tool {t.name!r}: parameter {p.name!r} is given twice")
            param: dict[str, object] = {
                "type": _named(_TYPE_FROM_PROTO, p.type, f"tool {t.name!r}: parameter type"),
                "required": p.required,
                "description": p.description,
            }
            if p.type == pb.PARAM_TYPE_STRING:
                param["max_length"] = p.max_length
            if p.HasField("minimum"):
                param["minimum"] = p.minimum
            if p.HasField("maximum"):
                param["maximum"] = p.maximum
            params[p.name] = param
        risk = risk_from_proto(t.risk)
        tool: dict[str, object] = {
            "name": t.name,
            "description": t.description,
            "risk": risk.name,
            "params": params,
        }
        if t.repeatable:
            tool["repeatable"] = True
        tools.append(tool)
    limits: dict[str, object] = {"max_concurrent_calls": msg.limits.max_concurrent_calls}
    if msg.limits.memory_bytes:
        limits["memory_mib"] = msg.limits.memory_bytes >> 20
    if msg.limits.call_timeout_ms:
        limits["call_timeout_s"] = msg.limits.call_timeout_ms / 1000
    return {
        "name": msg.name,
        "version": msg.version,
        "kind": _named(_KIND_FROM_PROTO, msg.kind, "kind"),
        "description": msg.description,
        "entry": msg.entry,
        "capabilities": list(msg.capabilities),
        "egress": [{"host": e.host, "port": e.port} for e in msg.egress],
        "limits": limits,
        "tools": tools,
    }


__all__ = [
    "CAPABILITIES",
    "DEFAULT_MAX_LENGTH",
    "EgressHost",
    "Limits",
    "Manifest",
    "Param",
    "ParamType",
    "PluginKind",
    "ToolRisk",
    "ToolSpec",
    "kind_to_proto",
    "risk_from_proto",
    "risk_to_proto",
]
