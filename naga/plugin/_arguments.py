"""A tool call's arguments: JSON text checked against the tool's params.

Both sides run this: the core before a call leaves it (a bad call never
reaches a plugin, and its caller learns exactly what is wrong), the plugin
SDK again when it arrives (the plugin does not trust the wire either).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from naga.constants import PLUGIN_MAX_ARGUMENTS_CHARS
from naga.plugin._manifest import Param, ParamType, ToolSpec
from naga.plugin.errors import InvalidArguments

#: What a checked argument can be.
Argument = str | int | float | bool


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the member {key!r} appears twice")
        found[key] = value
    return found


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, *, what: str) -> object:
    """Strict JSON: no NaN/Infinity, no duplicate members, bounded nesting."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except RecursionError:
        raise InvalidArguments(f"{what} are nested too deeply") from None
    except ValueError as exc:
        raise InvalidArguments(f"{what} are not valid JSON: {exc}") from None


def check_arguments(tool: ToolSpec, text: str) -> dict[str, Argument]:
    """The arguments of a call to ``tool``, checked; :class:`InvalidArguments`
    names the first problem. Empty text means no arguments (``{}``)."""
    what = f"the arguments of {tool.name}"
    if len(text) > PLUGIN_MAX_ARGUMENTS_CHARS:
        raise InvalidArguments(
            f"{what} are {len(text)} characters; at most {PLUGIN_MAX_ARGUMENTS_CHARS} are accepted"
        )
    value: object = parse_json(text, what=what) if text.strip() else {}
    if not isinstance(value, dict):
        raise InvalidArguments(f"{what} must be a JSON object, not {_json_type(value)}")
    return check_mapping(tool, value)  # pyright: ignore[reportUnknownArgumentType]


def check_mapping(tool: ToolSpec, given: Mapping[str, object]) -> dict[str, Argument]:
    known = {p.name for p in tool.params}
    for key in given:
        if key not in known:
            takes = ", ".join(sorted(known)) or "no arguments"
            raise InvalidArguments(f"{tool.name} has no argument {key!r} (it takes: {takes})")
    checked: dict[str, Argument] = {}
    for param in tool.params:
        if param.name not in given:
            if param.required:
                raise InvalidArguments(f"{tool.name}: argument {param.name!r} is required")
            continue
        checked[param.name] = _check(tool, param, given[param.name])
    return checked


def _check(tool: ToolSpec, param: Param, value: object) -> Argument:
    where = f"{tool.name}: argument {param.name!r}"
    if param.type is ParamType.STRING:
        if not isinstance(value, str):
            raise InvalidArguments(f"{where} must be a string, not {_json_type(value)}")
        if len(value) > param.max_length:
            raise InvalidArguments(
                f"{where} has {len(value)} characters; at most {param.max_length} are accepted"
            )
        return value
    if param.type is ParamType.BOOLEAN:
        if not isinstance(value, bool):
            raise InvalidArguments(f"{where} must be true or false, not {_json_type(value)}")
        return value
    # bool is an int subclass; true is not a number here.
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "an integer" if param.type is ParamType.INTEGER else "a number"
        raise InvalidArguments(f"{where} must be {kind}, not {_json_type(value)}")
    if param.type is ParamType.INTEGER and not isinstance(value, int):
        raise InvalidArguments(f"{where} must be an integer, not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArguments(f"{where} must be finite")
    if param.minimum is not None and value < param.minimum:
        raise InvalidArguments(f"{where} is {value}, below the minimum {param.minimum:g}")
    if param.maximum is not None and value > param.maximum:
        raise InvalidArguments(f"{where} is {value}, above the maximum {param.maximum:g}")
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    return "an object"


__all__ = ["Argument", "check_arguments", "check_mapping", "parse_json"]
