"""What the CLI says, word for word, against a real core (`naga daemon
start` with its gateway; only the model is a fake over loopback HTTP):
did-you-mean, empty chat text, the interactive chat (multi-line, history,
Ctrl-C), `naga log`, a refused providers.json, `doctor`'s provider check,
`config set model.provider`, `config list`'s sources, and `rollback`'s
preview and confirmation."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import IO

import pytest
import trio

from naga.sdk import Client
from naga_core.cli import main
from tests.agent.conftest import ServerThread, model_server, write_providers
from tests.daemon.conftest import REPO, CoreProcess, start_core_process
from tests.fakes.model_server import Reply

__all__ = ["model_server"]  # the fixture, used by name

#: The gateway port of each module core, by home.
_PORTS: dict[str, int] = {}
_TIME = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]"


class Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str], home: str) -> None:
        self._capsys = capsys
        self.home = home

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self._capsys.readouterr()
        try:
            code = main([*argv, "--home", self.home])
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
        out, err = self._capsys.readouterr()
        return code, out, err


@pytest.fixture(scope="module")
def core(
    tmp_path_factory: pytest.TempPathFactory, model_server: ServerThread
) -> Iterator[CoreProcess]:
    tmp = tmp_path_factory.mktemp("cli-messages")
    home = tmp / "home"
    home.mkdir(mode=0o700)
    write_providers(str(home), model_server.server.openai_url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = start_core_process(str(home), tmp / "core.log", gateway_port=port)
    _PORTS[proc.home] = port
    try:
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.proc.wait(60) == 0, proc.output()[-3000:]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], core: CoreProcess) -> Cli:
    return Cli(capsys, core.home)


def _providers(home: str) -> str:
    return os.path.join(home, "credentials", "providers.json")


# --- did you mean -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["chta"], "naga: error: unknown command 'chta'; did you mean 'chat' or 'wechat'?"),
        (["plugn", "list"], "naga: error: unknown command 'plugn'; did you mean 'plugin'?"),
        # Found by hand: a new user types "undo"; the command is rollback.
        (["undo"], "naga: error: unknown command 'undo'; did you mean 'rollback'?"),
        (["ledger", "verfy"], "naga ledger: error: unknown action 'verfy'; did you mean 'verify'?"),
        (
            ["daemon", "stat"],
            "naga daemon: error: unknown action 'stat'; did you mean 'start' or 'status'?",
        ),
    ],
)
def test_a_typo_gets_the_names_it_could_have_meant(cli: Cli, argv: list[str], said: str) -> None:
    code, out, err = cli(*argv)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == said


def test_a_name_far_from_any_lists_them_all(cli: Cli) -> None:
    code, _, err = cli("zzzz")
    assert code == 2
    last = err.splitlines()[-1]
    assert last.startswith("naga: error: unknown command 'zzzz' (one of: run, daemon, ")
    assert "chat, log" in last


# --- chat ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_an_empty_message_is_refused_with_what_to_do(cli: Cli, text: str) -> None:
    code, out, err = cli("chat", text)
    assert (code, out) == (1, "")
    assert err == (
        "naga: the message is empty: give some text, or run `naga chat` without text "
        "for an interactive chat\n"
    )


def test_a_message_too_long_is_refused(cli: Cli) -> None:
    code, _, err = cli("chat", "x" * 1_000_001)
    assert (code, err) == (1, "naga: the message is 1000001 bytes (UTF-8); at most 1000000\n")


def test_chat_and_the_console_share_the_session_main(
    cli: Cli, core: CoreProcess, model_server: ServerThread
) -> None:
    model_server.script(Reply.answer("shared", usage=(3, 1)))
    code, out, _ = cli("chat", "--json", "hello main")
    assert code == 0
    assert json.loads(out)["session"] == "main"
    with Client.connect(core.home) as c:
        assert "main" in [s.session for s in c.sessions()]


def _repl(core: CoreProcess) -> subprocess.Popen[bytes]:
    # faulthandler: a REPL found stuck is sent SIGABRT and says where it was.
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"}
    # The REPL gets SIGINT as a terminal gives it, not as this suite was
    # started: a suite run in the background of a non-interactive shell
    # (CI, `nohup make test &`) has SIGINT ignored, an ignored disposition
    # survives exec, and Python then never installs KeyboardInterrupt, so
    # Ctrl-C did nothing (the "hang" of 2026-12-02). A handler (unlike
    # SIG_IGN) is reset to the default across exec.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "naga_core.cli",
                "chat",
                "--home",
                core.home,
                "--session",
                "repl",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO,
        )
    finally:
        signal.signal(signal.SIGINT, before)


def _read_until(stream: IO[bytes], needle: bytes, timeout: float = 30.0) -> bytes:
    fd = stream.fileno()
    got = b""
    while needle not in got:
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"timed out waiting for {needle!r}; got {got!r}"
        chunk = os.read(fd, 65536)
        assert chunk, f"the stream ended before {needle!r}; got {got!r}"
        got += chunk
    return got


def test_the_interactive_chat_sends_multi_line_messages_and_keeps_a_history(
    core: CoreProcess, model_server: ServerThread
) -> None:
    model_server.script(Reply.answer("first answer"), Reply.answer("second answer"))
    p = _repl(core)
    out, err = p.communicate(b"hello\nline one \\\nline two\n/exit\n", timeout=60)
    assert p.returncode == 0, err.decode()
    text = out.decode()
    assert text.startswith(
        "naga chat, session repl. Enter sends; end a line with \\ to continue it on the next; "
        "Ctrl-C stops a reply; Ctrl-D or /exit leaves.\n"
    )
    assert "first answer" in text
    assert "second answer" in text
    asked = model_server.run(lambda: [r.json() for r in model_server.server.requests])
    last = asked[-1]["messages"][-1]["content"]
    assert last == "line one \nline two"
    with open(os.path.join(core.home, "chat_history"), encoding="utf-8") as f:
        assert "hello" in f.read()


def test_ctrl_c_stops_the_reply_and_the_chat_goes_on_and_log_shows_the_stop(
    core: CoreProcess, model_server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = trio.Event()
    model_server.script(Reply.held("partial words then more", gate, pieces=4))
    p = _repl(core)
    assert p.stdin is not None
    assert p.stdout is not None
    assert p.stderr is not None
    p.stdin.write(b"tell me a story\n")
    p.stdin.flush()
    _read_until(p.stdout, b"you> p")  # the first piece of the reply streamed
    p.send_signal(signal.SIGINT)
    try:
        _read_until(p.stderr, b"[stopped]")
    except AssertionError as exc:
        # Should Ctrl-C be lost again, say where the REPL was.
        p.send_signal(signal.SIGABRT)
        _, err = p.communicate(timeout=30)
        raise AssertionError(f"{exc}; the REPL's threads when stuck:\n{err.decode()}") from None
    model_server.run(gate.set)
    model_server.script(Reply.answer("after the stop"))
    out, err = p.communicate(b"go on\n", timeout=60)
    assert p.returncode == 0, err.decode()
    assert "after the stop" in out.decode()
    code = main(["log", "repl", "--home", core.home])
    assert code == 0
    out = capsys.readouterr().out
    assert any(re.fullmatch(_TIME + r" naga: .*\[stopped\]", line) for line in out.splitlines())


def test_log_prints_the_conversation_with_stops_and_tools(
    cli: Cli, core: CoreProcess, model_server: ServerThread
) -> None:
    with Client.connect(core.home) as c:
        c.enable_plugin("clock", wait=20.0)
    model_server.script(
        Reply.answer(tool_calls=(("c1", "clock__now", "{}"),)), Reply.answer("It is noon.")
    )
    assert cli("chat", "--session", "logged", "what time is it?")[0] == 0
    code, out, err = cli("log", "logged")
    assert code == 0, err
    lines = out.splitlines()
    assert re.fullmatch(_TIME + r" you: what time is it\?", lines[0]), lines
    assert re.fullmatch(_TIME + r"   tool clock\.now \{\} -> \{.*\"utc\".*\}", lines[1]), lines
    assert re.fullmatch(_TIME + r" naga: It is noon\.", lines[2]), lines
    code, _, err = cli("log", "nosuch")
    assert code == 1
    assert err.startswith("naga: no session named 'nosuch' (sessions: ")


def test_log_marks_what_a_rollback_undid(
    cli: Cli, core: CoreProcess, model_server: ServerThread
) -> None:
    """The console strikes undone turns through; `naga log` showed them as
    if they stood (found by hand after undoing a turn that wrote a file)."""
    model_server.script(Reply.answer("one"))
    assert cli("chat", "--session", "undo-log", "first")[0] == 0
    with Client.connect(core.home) as c:
        kept = c.history(limit=1).entries[0].seq
    model_server.script(Reply.answer("two"))
    assert cli("chat", "--session", "undo-log", "second")[0] == 0
    code, _, err = cli("rollback", "--to", str(kept), "--yes")
    assert code == 0, err
    code, out, err = cli("log", "undo-log")
    assert code == 0, err
    lines = out.splitlines()
    assert re.fullmatch(_TIME + r" you: first", lines[0]), lines
    assert re.fullmatch(_TIME + r" naga: one", lines[1]), lines
    assert re.fullmatch(_TIME + r" you: second  \[undone\]", lines[2]), lines
    assert re.fullmatch(_TIME + r" naga: two  \[undone\]", lines[3]), lines


# --- providers ------------------------------------------------------------------------


def test_config_set_refuses_a_provider_name_that_is_not_in_providers_json(
    cli: Cli, core: CoreProcess
) -> None:
    code, out, err = cli("config", "set", "model.provider", "nosuch")
    assert (code, out) == (1, "")
    assert err == (
        f"naga: model.provider: 'nosuch' is not a provider of {_providers(core.home)} "
        "(it lists: fake; or 'local' for the embedded model)\n"
    )
    with Client.connect(core.home) as c:
        assert c.get_setting("model.provider").value.text == ""
    assert cli("config", "set", "model.provider", "fake")[0] == 0
    assert cli("config", "reset", "model.provider")[0] == 0


def test_doctor_checks_that_model_provider_names_an_entry(cli: Cli, core: CoreProcess) -> None:
    with Client.connect(core.home) as c:
        c.set_setting_text("model.provider", "gone")  # as if the file lost it since
    try:
        _, out, _ = cli("doctor")
        (line,) = [x for x in out.splitlines() if "model provider:" in x]
        assert line == (
            f"FAIL model provider: model.provider = 'gone' names no provider "
            f"({_providers(core.home)} lists fake); known: fake, local. "
            "Fix it with `naga config set model.provider NAME`"
        )
    finally:
        with Client.connect(core.home) as c:
            c.reset_setting("model.provider")
    _, out, _ = cli("doctor")
    (line,) = [x for x in out.splitlines() if "model provider:" in x]
    assert line == (
        f"ok   model provider: {_providers(core.home)} lists fake; "
        "model.provider = unset (providers.json's default, else local)"
    )


def test_a_refused_providers_json_is_said_as_such(
    cli: Cli, core: CoreProcess, model_server: ServerThread
) -> None:
    path = _providers(core.home)
    with open(path, encoding="utf-8") as f:
        good = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write("{not json")
    try:
        _, out, _ = cli("doctor")
        (line,) = [x for x in out.splitlines() if "model provider:" in x]
        assert line == (
            f"FAIL model provider: {path} is refused: "
            "invalid JSON at line 1, column 2: Expecting property name enclosed in double quotes"
        )
        code, _, err = cli("chat", "--session", "refused", "hi")
        assert code == 1
        assert "could not be reached" not in err
        assert err.startswith("naga: no model provider to call: "), err
        assert "providers.json's default would be used, but the file was refused" in err, err
        code, _, err = cli("config", "set", "model.provider", "fake")
        assert code == 1
        assert err.startswith(
            "naga: cannot set model.provider to 'fake': invalid JSON at line 1, column 2"
        ), err
    finally:
        with open(path, "w", encoding="utf-8") as f:
            f.write(good)


# --- config list ------------------------------------------------------------------------


def test_config_list_shows_the_port_in_effect_and_where_it_comes_from(
    cli: Cli, core: CoreProcess
) -> None:
    code, out, _ = cli("config", "list")
    assert code == 0
    (line,) = [x for x in out.splitlines() if x.startswith("gateway.port")]
    port = _PORTS[core.home]
    assert line.startswith(
        f"gateway.port = {port}  (the core's --gateway-port flag; the setting says 18789; "
    ), line
    (steps,) = [x for x in out.splitlines() if x.startswith("agent.max_steps")]
    assert "(default; " in steps


# --- rollback ----------------------------------------------------------------------------


def test_rollback_without_dry_run_shows_the_preview_and_asks(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("trust", "set", "wechat:carol", "known")[0] == 0
    with Client.connect(cli.home) as c:
        before = c.history(1).entries[0].seq - 1
    # Not a terminal and no --yes: refused, nothing done.
    code, out, err = cli("rollback", "--to", str(before))
    assert (code, out) == (1, "")
    assert err == (
        f"naga: rollback to {before} would undo 1 effect(s); add --yes to do it, "
        "or --dry-run to see what it would undo\n"
    )
    # A terminal: the preview in words, then the question; "n" keeps all.
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    asked: list[str] = []

    def say_no(question: str) -> str:
        asked.append(question)
        return "n"

    monkeypatch.setattr("builtins.input", say_no)
    code, out, _ = cli("rollback", "--to", str(before))
    assert code == 1
    assert out == (
        f"rolling back to {before} would undo 1 effect(s) ({before + 1}..{before + 1}):\n"
        "  remove wechat:carol from the trust table\n"
        f"  undoes entry {before + 1}: owner set trust of wechat:carol: untrusted -> known\n"
        "cancelled: nothing was changed\n"
    )
    assert asked == ["undo these 1 effect(s)? [y/N] "]

    def say_yes(_question: str) -> str:
        return "y"

    monkeypatch.setattr("builtins.input", say_yes)
    code, out, _ = cli("rollback", "--to", str(before))
    assert code == 0
    assert out.splitlines()[-3:] == [
        f"rolled back to {before}: undid 1 effect(s) as ledger entry {before + 2}",
        "  remove wechat:carol from the trust table",
        f"  undoes entry {before + 1}: owner set trust of wechat:carol: untrusted -> known",
    ]


def test_rollback_dry_run_speaks_in_words(cli: Cli) -> None:
    assert cli("config", "set", "agent.max_steps", "7")[0] == 0
    with Client.connect(cli.home) as c:
        before = c.history(1).entries[0].seq - 1
    code, out, _ = cli("rollback", "--to", str(before), "--dry-run")
    assert code == 0
    assert out == (
        f"dry run: rolling back to {before} would undo 1 effect(s) ({before + 1}..{before + 1}):\n"
        "  reset agent.max_steps to its default\n"
        f"  undoes entry {before + 1}: set agent.max_steps = 7\n"
        "nothing was changed\n"
    )
    code, out, _ = cli("rollback", "--to", str(before), "--yes")
    assert code == 0
    assert out.splitlines()[-2:] == [
        "  reset agent.max_steps to its default",
        f"  undoes entry {before + 1}: set agent.max_steps = 7",
    ]
