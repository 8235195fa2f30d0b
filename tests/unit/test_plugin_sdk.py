"""The plugin SDK's side of the wire, run in a thread over a socket pair
(no sandbox): Hello first, heartbeats answered, calls checked and
answered, failures reported as ToolErrors, Shutdown honoured; and code that
does not match its manifest refused before any Hello."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from naga.constants import PLUGIN_PROTOCOL_VERSION
from naga.plugin import FrameReader, Manifest, decode_from_plugin, encode_frame
from naga.v1 import plugin_pb2 as pb
from naga_plugins import (
    SDK_VERSION,
    SETUP_EXIT_CODE,
    Call,
    CallAnswered,
    Plugin,
    PluginSdkError,
    PluginSetupError,
    ToolFailed,
)

MANIFEST = """
name = "calc"
version = "0.1.0"
kind = "tool"
description = "Arithmetic"
entry = "x.calc:main"

[[tools]]
name = "calc.add"
risk = "R0"
description = "a + b"
[tools.params.a]
type = "integer"
[tools.params.b]
type = "integer"
required = false

[[tools]]
name = "calc.fail"
risk = "R0"
description = "refuses"

[[tools]]
name = "calc.crash"
risk = "R0"
description = "raises"

[[tools]]
name = "calc.opaque"
risk = "R0"
description = "returns no JSON"
"""


def _add(a: int, b: int = 1) -> int:
    return a + b


def _calc(add: Callable[..., object] = _add) -> Plugin:
    calc = Plugin("calc")
    calc.tool("calc.add")(add)

    @calc.tool("calc.fail")
    def fail() -> None:
        raise ToolFailed("no, thank you")

    @calc.tool("calc.crash")
    def crash() -> None:
        raise ValueError("bad value")

    @calc.tool("calc.opaque")
    def opaque() -> object:
        return object()

    return calc


class Core:
    """The core's end of the socket pair, blocking, for the test."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = FrameReader()

    def send(self, frame: pb.CoreToPlugin) -> None:
        self.sock.sendall(encode_frame(frame))

    def receive(self) -> pb.PluginToCore:
        while (body := self.reader.next_body()) is None:
            data = self.sock.recv(65536)
            assert data, "the plugin closed the connection"
            self.reader.feed(data)
        return decode_from_plugin(body)

    def call(self, call_id: int, tool: str, arguments: str = "") -> pb.PluginToCore:
        self.send(
            pb.CoreToPlugin(invoke=pb.Invoke(call_id=call_id, tool=tool, arguments_json=arguments))
        )
        return self.receive()


@pytest.fixture
def manifest_path(tmp_path: Path) -> Path:
    path = tmp_path / "plugin.toml"
    path.write_text(MANIFEST)
    return path


class Worker:
    """``Plugin.main`` of the calc plugin, on a thread."""

    def __init__(self, manifest_path: Path, add: Callable[..., object] = _add) -> None:
        ours, theirs = socket.socketpair()
        self.core = Core(ours)
        self._ended: list[int] = []
        fd = str(theirs.detach())
        self._thread = threading.Thread(
            target=lambda: self._ended.append(_calc(add).main([fd, str(manifest_path)]))
        )
        self._thread.start()

    def exit_code(self) -> int:
        self._thread.join(10)
        assert not self._thread.is_alive(), "the worker did not end"
        (code,) = self._ended
        return code


@pytest.fixture
def served(manifest_path: Path) -> Iterator[tuple[Core, Worker]]:
    worker = Worker(manifest_path)
    with worker.core.sock:
        yield worker.core, worker
    worker.exit_code()


def test_hello_first_then_heartbeats_and_calls(served: tuple[Core, Worker]) -> None:
    core, worker = served
    hello = core.receive().hello
    assert hello.sdk_version == SDK_VERSION
    assert hello.protocol_version == PLUGIN_PROTOCOL_VERSION
    assert Manifest.from_proto(hello.manifest) == Manifest.parse(MANIFEST)

    core.send(pb.CoreToPlugin(ping=pb.Ping(nonce=7)))
    assert core.receive().pong.nonce == 7

    assert core.call(1, "calc.add", '{"a": 2, "b": 3}').result == pb.Result(
        call_id=1, result_json="5"
    )
    assert core.call(2, "calc.add", '{"a": 2}').result.result_json == "3"

    core.send(pb.CoreToPlugin(shutdown=pb.Shutdown(reason="done")))
    assert core.sock.recv(1) == b""  # it closed its end
    assert worker.exit_code() == 0


@pytest.mark.parametrize(
    ("tool", "arguments", "kind", "said"),
    [
        (
            "calc.add",
            '{"a": "2"}',
            pb.TOOL_ERROR_KIND_INVALID_ARGUMENTS,
            "argument 'a' must be an integer",
        ),
        ("calc.add", "", pb.TOOL_ERROR_KIND_INVALID_ARGUMENTS, "argument 'a' is required"),
        ("calc.nope", "", pb.TOOL_ERROR_KIND_UNKNOWN_TOOL, "calc has no tool 'calc.nope'"),
        ("calc.fail", "", pb.TOOL_ERROR_KIND_FAILED, "no, thank you"),
        ("calc.crash", "", pb.TOOL_ERROR_KIND_FAILED, "ValueError: bad value"),
        ("calc.opaque", "", pb.TOOL_ERROR_KIND_INTERNAL, "calc.opaque returned no JSON value"),
    ],
)
def test_failures_are_tool_errors_for_the_caller(
    served: tuple[Core, Worker], tool: str, arguments: str, kind: int, said: str
) -> None:
    core, worker = served
    core.receive()  # Hello
    error = core.call(9, tool, arguments).error
    assert error.call_id == 9
    assert error.kind == kind
    assert said in error.message
    # The worker serves on.
    assert core.call(10, "calc.add", '{"a": 1}').result.result_json == "2"
    core.sock.shutdown(socket.SHUT_WR)  # the core going away ends the worker too
    assert core.sock.recv(1) == b""
    assert worker.exit_code() == 0


def _refused(plugin: Plugin, manifest: str, tmp_path: Path) -> str:
    path = tmp_path / "plugin.toml"
    path.write_text(manifest)
    with pytest.raises(PluginSetupError) as caught:
        plugin.check(Manifest.load(path))
    return str(caught.value)


def test_code_that_does_not_match_its_manifest_is_refused(tmp_path: Path) -> None:
    short = Plugin("calc")
    short.tool("calc.add")(_add)
    assert (
        "tools in the manifest but not in the code: ['calc.crash', 'calc.fail', 'calc.opaque']"
        in _refused(short, MANIFEST, tmp_path)
    )

    extra = _calc()
    extra.tool("calc.more")(lambda: 1)
    assert "tools in the code but not in the manifest: ['calc.more']" in _refused(
        extra, MANIFEST, tmp_path
    )

    other = Plugin("other")
    assert "the manifest is for 'calc', not 'other'" in _refused(other, MANIFEST, tmp_path)


def _no_default(a: int, b: int) -> int:
    return a + b


def _all_defaults(a: int = 0, b: int = 1) -> int:
    return a + b


def _extra(a: int, b: int = 1, c: int = 2) -> int:
    return a + b + c


def _lacking(a: int) -> int:
    return a


def _star(*a: int, b: int = 1) -> int:
    return sum(a) + b


@pytest.mark.parametrize(
    ("add", "said"),
    [
        (_no_default, "'b' is optional in the manifest but has no default"),
        (_all_defaults, "'a' is required in the manifest but has a default"),
        (_extra, "parameter 'c' is not in the manifest"),
        (_lacking, "the function lacks parameters ['b']"),
        (_star, "parameter 'a' must be a plain name"),
    ],
)
def test_a_tool_signature_must_match_its_params(
    tmp_path: Path, add: Callable[..., object], said: str
) -> None:
    assert said in _refused(_calc(add), MANIFEST, tmp_path)


def test_a_mismatch_exits_before_any_hello(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plugin.toml"
    path.write_text(MANIFEST)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert Plugin("calc").main([str(theirs.fileno()), str(path)]) == SETUP_EXIT_CODE
        ours.setblocking(False)
        with pytest.raises(BlockingIOError):
            ours.recv(1)  # nothing was said
    assert (
        "plugin calc: cannot serve: tools in the manifest but not in the code"
        in capsys.readouterr().err
    )
    assert Plugin("calc").main(["x"]) == SETUP_EXIT_CODE


def test_progress_goes_before_the_answer_and_never_after(manifest_path: Path) -> None:
    calls: list[Call] = []

    def chatty_add(a: int, b: int = 1) -> int:
        call = Plugin.current_call()
        calls.append(call)
        call.progress("work")
        call.progress("ing")
        return a + b

    worker = Worker(manifest_path, chatty_add)
    with worker.core.sock:
        core = worker.core
        core.receive()  # Hello
        first = core.call(4, "calc.add", '{"a": 1}')
        frames = [first, core.receive(), core.receive()]
        assert [f.WhichOneof("frame") for f in frames] == ["progress", "progress", "result"]
        assert [f.progress.text for f in frames[:2]] == ["work", "ing"]
        assert {f.progress.call_id for f in frames[:2]} == {4}
        assert frames[2].result.result_json == "2"
        with pytest.raises(CallAnswered, match="call 4 is already answered"):
            calls[0].progress("too late")
        core.send(pb.CoreToPlugin(shutdown=pb.Shutdown(reason="done")))
        assert core.sock.recv(1) == b""  # nothing followed the answer
    assert worker.exit_code() == 0


def test_current_call_outside_a_tool_is_refused() -> None:
    with pytest.raises(PluginSdkError, match="only available inside a running tool"):
        Plugin.current_call()
