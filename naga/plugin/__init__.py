"""The plugin contracts both sides share (docs/design/plugins.md).

* :class:`Manifest`: a plugin's ``plugin.toml``, validated at the boundary
  into frozen plain classes (name, version, kind, tools with their risk
  levels and params, capabilities, egress hosts, limits);
* :func:`check_arguments`: a call's JSON arguments against a tool's params;
* the wire's framing (:func:`encode_frame`, :class:`FrameReader`) for the
  ``naga.v1.plugin_pb2`` messages.

The core imports this to install and supervise plugins; the plugin SDK
(``naga_plugins``) imports it to serve. Neither side imports the other.
"""

from naga.plugin import errors
from naga.plugin._arguments import Argument, check_arguments, check_mapping, parse_json
from naga.plugin._frames import (
    FrameReader,
    decode_from_core,
    decode_from_plugin,
    encode_frame,
)
from naga.plugin._manifest import (
    CAPABILITIES,
    EgressHost,
    Limits,
    Manifest,
    Param,
    ParamType,
    PluginKind,
    ToolRisk,
    ToolSpec,
    kind_to_proto,
    risk_from_proto,
    risk_to_proto,
)

__all__ = [
    "CAPABILITIES",
    "Argument",
    "EgressHost",
    "FrameReader",
    "Limits",
    "Manifest",
    "Param",
    "ParamType",
    "PluginKind",
    "ToolRisk",
    "ToolSpec",
    "check_arguments",
    "check_mapping",
    "decode_from_core",
    "decode_from_plugin",
    "encode_frame",
    "errors",
    "kind_to_proto",
    "parse_json",
    "risk_from_proto",
    "risk_to_proto",
]
