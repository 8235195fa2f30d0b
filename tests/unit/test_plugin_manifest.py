"""Plugin manifests (naga.plugin.Manifest) and tool arguments: what is
accepted, and a clear error naming the field for everything else."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga.plugin import (
    Manifest,
    ParamType,
    PluginKind,
    ToolRisk,
    check_arguments,
)
from naga.plugin.errors import InvalidArguments, ManifestInvalid
from naga.v1 import plugin_pb2 as pb
from naga_core.plugins import SHIPPED_ROOT

GOOD = """
name = "notes"
version = "1.2.3"
kind = "tool"
description = "Notes"
entry = "pkg.notes:main"
capabilities = ["core"]

[limits]
memory_mib = 64
call_timeout_s = 2.5
max_concurrent_calls = 2

[[egress]]
host = "api.example.com"
port = 443

[[tools]]
name = "notes.write"
risk = "R2"
description = "Write one"
[tools.params.title]
type = "string"
max_length = 10
[tools.params.count]
type = "integer"
required = false
minimum = 0
maximum = 9
[tools.params.ratio]
type = "number"
required = false
[tools.params.force]
type = "boolean"
required = false
"""


def test_a_full_manifest_is_read_into_plain_frozen_classes() -> None:
    m = Manifest.parse(GOOD)
    assert (m.name, m.version, m.kind, m.entry) == (
        "notes",
        "1.2.3",
        PluginKind.TOOL,
        "pkg.notes:main",
    )
    assert m.capabilities == frozenset({"core"})
    assert [(e.host, e.port) for e in m.egress] == [("api.example.com", 443)]
    assert (m.limits.memory_bytes, m.limits.call_timeout_s) == (64 << 20, 2.5)
    assert m.limits.max_concurrent_calls == 2
    (tool,) = m.tools
    assert tool.risk is ToolRisk.R2
    assert m.max_risk is ToolRisk.R2
    assert [(p.name, p.type, p.required) for p in tool.params] == [
        ("title", ParamType.STRING, True),
        ("count", ParamType.INTEGER, False),
        ("ratio", ParamType.NUMBER, False),
        ("force", ParamType.BOOLEAN, False),
    ]
    assert m.version_key == (1, 2, 3)
    with pytest.raises(AttributeError):
        m.name = "other"  # type: ignore[misc]
    assert Manifest.from_proto(m.to_proto()) == m


@pytest.mark.parametrize(
    "directory",
    sorted(
        p.name for p in Path(SHIPPED_ROOT).iterdir() if p.is_dir() and not p.name.startswith("_")
    ),
)
def test_the_shipped_plugins_validate_and_match_their_code(directory: str) -> None:
    import importlib

    manifest = Manifest.load(Path(SHIPPED_ROOT, directory, "plugin.toml"))
    module_name, _, function = manifest.entry.partition(":")
    module = importlib.import_module(module_name)
    plugin = module.plugin
    assert getattr(module, function) == plugin.main
    plugin.check(manifest)  # raises if the code and the manifest differ


def _with(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new)


BAD = {
    "name with capitals": (_with('name = "notes"', 'name = "Notes"'), "name: must be lowercase"),
    "name too long": (
        _with('name = "notes"', f'name = "{"n" * 41}"'),
        "name: String should have at most 40",
    ),
    "version not semver": (
        _with('version = "1.2.3"', 'version = "1.2"'),
        "version: must be MAJOR.MINOR.PATCH",
    ),
    "unknown kind": (
        _with('kind = "tool"', 'kind = "daemon"'),
        "kind: Input should be 'channel', 'model_provider' or 'tool'",
    ),
    "entry without function": (
        _with('"pkg.notes:main"', '"pkg.notes"'),
        "entry: must be 'package.module:function'",
    ),
    "unknown field": (GOOD + '\nflavour = "x"\n', "flavour: is not a manifest field"),
    "missing description": (_with('description = "Notes"\n', ""), "description: is required"),
    "unknown capability": (
        _with('["core"]', '["root"]'),
        "capabilities[0]: Input should be 'core'",
    ),
    "port out of range": (
        _with("port = 443", "port = 70000"),
        "egress[0].port: Input should be less than or equal to 65535",
    ),
    "bad host": (
        _with('"api.example.com"', '"a b"'),
        "egress[0].host: must be a host name or an IP address",
    ),
    "risk out of range": (
        _with('risk = "R2"', 'risk = "R5"'),
        "tools[0].risk: Input should be 'R0', 'R1', 'R2', 'R3' or 'R4'",
    ),
    "risk as a number": (_with('risk = "R2"', "risk = 2"), "tools[0].risk: Input should be 'R0'"),
    "tool not named after the plugin": (
        _with('name = "notes.write"', 'name = "files.write"'),
        "tool 'files.write' must be named after its plugin",
    ),
    "tool twice": (
        GOOD + '\n[[tools]]\nname = "notes.write"\nrisk = "R0"\ndescription = "again"\n',
        "tool 'notes.write' is declared twice",
    ),
    "param type unknown": (
        _with('type = "boolean"', 'type = "list"'),
        "tools[0].params.force.type: Input should be",
    ),
    "max_length on an integer": (
        _with("minimum = 0", "max_length = 3"),
        "max_length applies to strings only",
    ),
    "minimum above maximum": (
        _with("minimum = 0", "minimum = 10"),
        "minimum 10.0 is above maximum 9.0",
    ),
    "memory too small": (
        _with("memory_mib = 64", "memory_mib = 1"),
        "limits.memory_mib: Input should be greater than or equal to 16",
    ),
    "call timeout zero": (
        _with("call_timeout_s = 2.5", "call_timeout_s = 0"),
        "limits.call_timeout_s: Input should be greater than 0",
    ),
    "tool plugin without tools": (
        'name = "x"\nversion = "1.0.0"\nkind = "tool"\ndescription = "d"\nentry = "a:b"\n',
        "a tool plugin must declare at least one [[tools]] entry",
    ),
    "not TOML": ("name = ", "not valid TOML"),
    "repeatable not a boolean": (
        _with('risk = "R2"', 'risk = "R2"\nrepeatable = "yes"'),
        "tools[0].repeatable: Input should be a valid boolean",
    ),
    "repeatable in a workspace plugin": (
        _with('["core"]', '["workspace"]').replace('risk = "R2"', 'risk = "R2"\nrepeatable = true'),
        "tool 'notes.write': repeatable cannot be declared by a plugin with the shell or "
        "workspace capability",
    ),
    "repeatable in a shell plugin": (
        _with('["core"]', '["shell"]').replace('risk = "R2"', 'risk = "R2"\nrepeatable = true'),
        "repeatable cannot be declared by a plugin with the shell or workspace capability",
    ),
    "repeatable in a channel": (
        _with('kind = "tool"', 'kind = "channel"').replace(
            'risk = "R2"', 'risk = "R2"\nrepeatable = true'
        ),
        "tool 'notes.write': repeatable applies to a tool plugin's tools only",
    ),
}


def test_repeatable_is_read_and_defaults_to_false() -> None:
    assert Manifest.parse(GOOD).tools[0].repeatable is False
    m = Manifest.parse(_with('risk = "R2"', 'risk = "R2"\nrepeatable = true'))
    assert m.tools[0].repeatable is True
    assert m.to_proto().tools[0].repeatable
    assert Manifest.from_proto(m.to_proto()) == m
    web = Manifest.load(
        Path(__file__).resolve().parents[2] / "naga_plugins" / "tools" / "web" / "plugin.toml"
    )
    assert [(t.name, t.repeatable) for t in web.tools] == [("web.fetch", True)]


@pytest.mark.parametrize("case", BAD, ids=BAD.keys())
def test_a_bad_manifest_names_the_field_and_the_rule(case: str) -> None:
    text, said = BAD[case]
    with pytest.raises(ManifestInvalid) as caught:
        Manifest.parse(text, source="x/plugin.toml")
    assert str(caught.value).startswith("x/plugin.toml: ")
    assert any(said in problem for problem in caught.value.problems), caught.value.problems


def test_every_problem_is_reported_at_once() -> None:
    text = _with('name = "notes"', 'name = "N"').replace('version = "1.2.3"', 'version = "x"')
    with pytest.raises(ManifestInvalid) as caught:
        Manifest.parse(text)
    assert [p.split(":")[0] for p in caught.value.problems] == ["name", "version"]


def test_manifest_files_that_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(ManifestInvalid, match="cannot read it"):
        Manifest.load(tmp_path / "missing.toml")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (65 << 10))
    with pytest.raises(ManifestInvalid, match="larger than 65536 bytes"):
        Manifest.load(big)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'name = "caf\xe9"')
    with pytest.raises(ManifestInvalid, match="not UTF-8"):
        Manifest.load(latin)


def test_a_hello_manifest_with_unknown_enum_values_is_refused() -> None:
    msg = Manifest.parse(GOOD).to_proto()
    msg.kind = 42  # type: ignore[assignment]
    with pytest.raises(ManifestInvalid, match="kind: 42 is not a known value"):
        Manifest.from_proto(msg)
    msg = Manifest.parse(GOOD).to_proto()
    msg.tools[0].risk = pb.TOOL_RISK_UNSPECIFIED
    with pytest.raises(ManifestInvalid, match=r"risk 0 is not one of R0\.\.R4"):
        Manifest.from_proto(msg)


# --- round trip -----------------------------------------------------------------------

_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    name = draw(_names)
    plugin_kind = draw(st.sampled_from(["tool", "channel", "model_provider"]))
    tools: list[dict[str, object]] = []
    for tool_name in draw(st.lists(_names, min_size=1, max_size=4, unique=True)):
        params: dict[str, object] = {}
        for param in draw(st.lists(_names, max_size=3, unique=True)):
            kind = draw(st.sampled_from(["string", "integer", "number", "boolean"]))
            spec: dict[str, object] = {"type": kind, "required": draw(st.booleans())}
            if kind == "string":
                spec["max_length"] = draw(st.integers(1, 60000))
            elif kind != "boolean" and draw(st.booleans()):
                spec["minimum"] = float(draw(st.integers(-100, 0)))
                spec["maximum"] = float(draw(st.integers(0, 100)))
            params[param] = spec
        tool: dict[str, object] = {
            "name": f"{name}.{tool_name}",
            "description": "d",
            "risk": draw(st.sampled_from(["R0", "R1", "R2", "R3", "R4"])),
            "params": params,
        }
        if plugin_kind == "tool":
            tool["repeatable"] = draw(st.booleans())
        tools.append(tool)
    data: dict[str, object] = {
        "name": name,
        "version": ".".join(str(draw(st.integers(0, 99))) for _ in range(3)),
        "kind": plugin_kind,
        "description": "d",
        "entry": "pkg.mod:main",
        "tools": tools,
        "limits": {"max_concurrent_calls": draw(st.integers(1, 64))},
    }
    return Manifest.from_mapping(data, source="generated")


@settings(max_examples=60, deadline=None)
@given(manifests())
def test_a_manifest_survives_the_hello(m: Manifest) -> None:
    wire = m.to_proto().SerializeToString(deterministic=True)
    assert Manifest.from_proto(pb.PluginManifest.FromString(wire)) == m


@pytest.mark.parametrize(
    ("host", "port", "said"),
    [
        ("127.0.0.1", 8080, "is this machine (loopback)"),
        ("127.8.9.10", 443, "is this machine (loopback)"),
        ("localhost", 443, "is this machine (loopback)"),
        ("api.localhost", 443, "is this machine (loopback)"),
        ("::1", 443, "is this machine (loopback)"),
        ("::ffff:127.0.0.1", 443, "is this machine (loopback)"),
        ("0.0.0.0", 443, "is this machine (loopback)"),
        ("api.example.com", 18789, "egress port 18789 is the WebChat gateway's"),
        ("10.1.2.3", 443, "is a private or link-local address"),
        ("192.168.1.1", 443, "is a private or link-local address"),
        ("172.16.0.1", 443, "is a private or link-local address"),
        ("169.254.169.254", 80, "is a private or link-local address"),
        ("fe80::1", 443, "is a private or link-local address"),
        ("fd00::1", 443, "is a private or link-local address"),
    ],
)
def test_egress_to_this_machine_or_its_network_is_refused(host: str, port: int, said: str) -> None:
    text = _with('host = "api.example.com"\nport = 443', f'host = "{host}"\nport = {port}')
    with pytest.raises(ManifestInvalid) as info:
        Manifest.parse(text)
    assert "egress[0]: " in str(info.value)
    assert said in str(info.value)
    # The owner's own configuration (a local model) may: its loader says so.
    assert Manifest.parse(text, local_egress=True).egress[0].host == host


def test_public_egress_is_accepted() -> None:
    for host in ("api.example.com", "8.8.8.8", "2606:4700::1111"):
        text = _with('host = "api.example.com"', f'host = "{host}"')
        assert Manifest.parse(text).egress[0].host == host


# --- arguments ------------------------------------------------------------------------

_TOOL = Manifest.parse(GOOD).tools[0]


def test_arguments_that_match_are_returned_typed() -> None:
    assert check_arguments(_TOOL, '{"title": "a", "count": 3, "ratio": 0.5, "force": true}') == {
        "title": "a",
        "count": 3,
        "ratio": 0.5,
        "force": True,
    }
    assert check_arguments(_TOOL, '{"title": "a", "ratio": 2}') == {"title": "a", "ratio": 2}


ARGS = {
    "empty text": ("", "argument 'title' is required"),
    "not JSON": ("{", "are not valid JSON"),
    "an array": ("[]", "must be a JSON object, not an array"),
    "null": ("null", "must be a JSON object, not null"),
    "unknown argument": (
        '{"title": "a", "x": 1}',
        "notes.write has no argument 'x' (it takes: count, force, ratio, title)",
    ),
    "string too long": (
        '{"title": "abcdefghijk"}',
        "argument 'title' has 11 characters; at most 10",
    ),
    "number for a string": ('{"title": 1}', "argument 'title' must be a string, not a number"),
    "true for an integer": (
        '{"title": "a", "count": true}',
        "argument 'count' must be an integer, not a boolean",
    ),
    "float for an integer": (
        '{"title": "a", "count": 1.5}',
        "argument 'count' must be an integer, not 1.5",
    ),
    "below minimum": ('{"title": "a", "count": -1}', "argument 'count' is -1, below the minimum 0"),
    "above maximum": ('{"title": "a", "count": 10}', "argument 'count' is 10, above the maximum 9"),
    "NaN": ('{"title": "a", "ratio": NaN}', "NaN is not a JSON number"),
    "infinite": ('{"title": "a", "ratio": 1e999}', "argument 'ratio' must be finite"),
    "string for a flag": (
        '{"title": "a", "force": "yes"}',
        "argument 'force' must be true or false, not a string",
    ),
    "duplicate member": ('{"title": "a", "title": "b"}', "the member 'title' appears twice"),
    "nested too deeply": ("[" * 100_000 + "]" * 100_000, "characters; at most 60000"),
    "deep but short": ('{"title": ' + "[" * 20_000 + "]" * 20_000 + "}", "nested too deeply"),
    "huge integer": ('{"title": "a", "count": ' + "9" * 5000 + "}", "are not valid JSON"),
}


@pytest.mark.parametrize("case", ARGS, ids=ARGS.keys())
def test_bad_arguments_are_refused_by_name(case: str) -> None:
    text, said = ARGS[case]
    with pytest.raises(InvalidArguments) as caught:
        check_arguments(_TOOL, text)
    assert said in str(caught.value), caught.value
