"""The console in real headless Chromium against a real core (``naga daemon
start`` with its gateway; only the model is fake): the approval card (shown
with the call's arguments; allow runs it, deny and silence do not), and
"undo to here" (the dry run lists the reply as irreversible and the write
as restored; the file comes back; the undone turn is shown, marked)."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import socket as socketlib
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from naga.sdk import Client
from tests.agent.conftest import ServerThread, model_server, write_providers
from tests.cli.conftest import naga_command
from tests.daemon.conftest import CoreProcess, start_core_process
from tests.fakes.model_server import Reply
from tests.gateway._console import open_console as console_page
from tests.gateway.test_browser import WAIT_S, browser
from tests.tools._turns import model_name

__all__ = ["browser", "model_server"]  # fixtures, used by name

pytestmark = pytest.mark.slow


@dataclass
class Console:
    home: str
    port: int
    core: CoreProcess
    model: ServerThread

    @property
    def workspace(self) -> str:
        return os.path.join(self.home, "workspace")

    def client(self) -> Client:
        return Client.connect(self.home)


@pytest.fixture(scope="module")
def console(
    tmp_path_factory: pytest.TempPathFactory, model_server: ServerThread
) -> Iterator[Console]:
    root = tmp_path_factory.mktemp("console")
    home = root / "home"
    home.mkdir(mode=0o700)
    write_providers(str(home), model_server.server.openai_url)
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    # A test may restart the core: the one running is always console.core.
    console = Console(
        str(home),
        port,
        start_core_process(str(home), root / "core.log", gateway_port=port),
        model_server,
    )
    try:
        with Client.connect(str(home)) as c:
            c.set_setting_text("tools.max_risk", "R3")  # fs.delete and shell.run offered
            for name in ("fs", "shell"):
                c.enable_plugin(name, wait=30)
        yield console
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- core log ---\n{console.core.output()[-3000:]}") from None
    finally:
        os.kill(console.core.pid, signal.SIGTERM)
        assert console.core.proc.wait(60) == 0, console.core.output()


def _selenium(module: str) -> Any:
    return importlib.import_module(module)  # as tests/gateway/test_browser.py does


def _wait(d: Any, what: str, check: Callable[[Any], Any]) -> Any:
    timeout: type[Exception] = _selenium("selenium.common.exceptions").TimeoutException
    wait = _selenium("selenium.webdriver.support.ui").WebDriverWait
    try:
        return wait(d, WAIT_S, poll_frequency=0.05).until(check)
    except timeout:
        raise AssertionError(f"timed out waiting for {what}") from None


def _replies(d: Any) -> list[str]:
    return [t.strip() for t in _texts(d, "#messages li.assistant.final .bubble")]


def _click(d: Any, selector: str) -> bool:
    script = "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e"
    return bool(d.execute_script(script, selector))


def _texts(d: Any, selector: str) -> list[str]:
    script = "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)"
    return list(d.execute_script(script, selector))


def open_console(d: Any, c: Console) -> None:
    """Every page of these tests opens here: logged in as the owner first
    (tests.gateway._console.open_console, through the one-time link)."""
    console_page(d, c.port, home=c.home)


def _say(d: Any, text: str) -> None:
    enter: str = _selenium("selenium.webdriver.common.keys").Keys.ENTER
    d.find_element("id", "text").send_keys(text, enter)


def _call(tool: str, args: str, reply: str) -> tuple[Reply, Reply]:
    return (
        Reply.answer(tool_calls=(("c1", model_name(tool), args),)),
        Reply.answer(reply),
    )


def _card_state(d: Any) -> str:
    script = (
        "const c = [...document.querySelectorAll('#messages .approval')].pop();"
        " return c ? (c.dataset.state || 'open') + '|' + c.textContent : ''"
    )
    return str(d.execute_script(script))


def _click_card(d: Any, which: str) -> bool:
    script = (
        "const c = [...document.querySelectorAll('#messages .approval')].pop();"
        " const b = c && c.querySelector('button.' + arguments[0]);"
        " if (b && !b.disabled) b.click(); return !!b"
    )
    return bool(d.execute_script(script, which))


def test_the_approval_card_allows_denies_and_times_out(console: Console, browser: Any) -> None:
    d = browser
    open_console(d, console)
    target = os.path.join(console.workspace, "old.txt")
    with open(target, "w") as f:
        f.write("old")

    console.model.script(*_call("fs.delete", '{"path": "old.txt"}', "deleted"))
    _say(d, "delete old.txt")
    _wait(d, "the card", lambda _: _card_state(d).startswith("open|"))
    assert "Allow fs.delete (R3)?" in _card_state(d)
    assert '{"path": "old.txt"}' in _card_state(d)
    # The time left (tools.approval_timeout_s, 120 s by default), counted down.
    left = re.search(r"Answer within (\d+):(\d\d), or it is denied\.", _card_state(d))
    assert left, _card_state(d)
    assert 0 < int(left[1]) * 60 + int(left[2]) <= 120
    assert os.path.exists(target)
    assert _click_card(d, "allow")
    _wait(d, "the reply", lambda _: "deleted" in _replies(d))
    assert _card_state(d).startswith("allowed|")
    assert "Answer within" not in _card_state(d)  # answered: no more countdown
    assert not os.path.exists(target)

    console.model.script(*_call("shell.run", '{"command": "echo x > denied.txt"}', "not done"))
    _say(d, "make denied.txt")
    _wait(d, "the second card", lambda _: _card_state(d).startswith("open|"))
    assert "echo x > denied.txt" in _card_state(d)
    assert _click_card(d, "deny")
    _wait(d, "the reply", lambda _: "not done" in _replies(d))
    assert _card_state(d).startswith("denied|")
    assert "the owner denied it" in _card_state(d)
    assert not os.path.exists(os.path.join(console.workspace, "denied.txt"))

    with console.client() as c:
        c.set_setting("tools.approval_timeout_s", 1.0)
    try:
        console.model.script(*_call("shell.run", '{"command": "echo x > late.txt"}', "late"))
        _say(d, "make late.txt")
        _wait(d, "the third card", lambda _: "late.txt" in _card_state(d))
        _wait(d, "the timeout", lambda _: "did not answer in time" in _card_state(d))
        assert _card_state(d).startswith("settled|")
        assert not _click_card(d, "allow") or "did not answer" in _card_state(d)
    finally:
        with console.client() as c:
            c.reset_setting("tools.approval_timeout_s")
    assert not os.path.exists(os.path.join(console.workspace, "late.txt"))


def test_undo_restores_the_file_and_marks_the_turn_undone(console: Console, browser: Any) -> None:
    d = browser
    path = Path(console.workspace) / "notes.txt"
    path.write_text("the owner's notes")
    open_console(d, console)
    console.model.script(Reply.answer("hello"))
    _say(d, "hi there")
    _wait(d, "the first reply", lambda _: "hello" in _replies(d))
    console.model.script(
        *_call("fs.write", '{"path": "notes.txt", "content": "overwritten"}', "saved")
    )
    _say(d, "overwrite my notes")
    _wait(
        d,
        "the second reply",
        lambda _: "saved" in _replies(d),
    )
    assert path.read_text() == "overwritten"

    keep = int(
        d.execute_script(
            "return [...document.querySelectorAll('#messages li.assistant.final')]"
            ".find((e) => e.querySelector('.bubble').textContent.trim() === 'hello').dataset.seq"
        )
    )
    _click(d, '#pages button[data-page="rollback"]')
    _wait(
        d,
        "the entry to undo to",
        lambda _: _click(d, f'#page-rollback button.undo[data-seq="{keep}"]'),
    )
    _wait(d, "the dry run", lambda _: d.find_element("id", "preview").is_displayed())
    restored = _texts(d, "#preview-words li.restored")
    cannot = _texts(d, "#preview-words li.irreversible")
    assert any("tool fs.write" in t and "notes.txt" in t for t in restored), restored
    assert any("reply of turn" in t and "cannot be unsent" in t for t in cannot), cannot
    assert path.read_text() == "overwritten", "the dry run changed nothing"

    d.find_element("id", "confirm-undo").click()
    _wait(d, "the file restored", lambda _: path.read_text() == "the owner's notes")
    open_console(d, console)  # a reload: the marks come from the core's history
    _wait(
        d,
        "the undone turn, marked",
        lambda _: (
            [t.strip() for t in _texts(d, "#messages li.undone .bubble")]
            == ["overwrite my notes", "saved"]
        ),
    )
    assert "hello" in [t.strip() for t in _texts(d, "#messages li.assistant:not(.undone) .bubble")]


def _restart(c: Console) -> None:
    """Stop the core (every worker ends: its tokens are revoked) and start
    it again on the same home and gateway port."""
    os.kill(c.core.pid, signal.SIGTERM)
    assert c.core.proc.wait(60) == 0, c.core.output()
    c.core = start_core_process(c.home, c.core.log, gateway_port=c.port)


def _tree(root: Path) -> dict[str, str | None]:
    """Every path under ``root``: a file's text, None for a directory."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_text()
        for p in sorted(root.rglob("*"))
    }


def _refusal(d: Any) -> str:
    """What the core answered the Undo click, if it refused (an error box
    outside the preview card)."""
    script = (
        "return [...document.querySelectorAll('#page-rollback p.error-box')]"
        ".filter((e) => !e.closest('#preview')).map((e) => e.textContent).join(' ')"
    )
    return str(d.execute_script(script))


def test_undo_past_a_core_restart_restores_the_files(console: Console, browser: Any) -> None:
    """A restart ends every worker and revokes its tokens; the console's
    "undo to here" past it used to be refused ("only the owner can": the
    undo would lift those revocations). A rollback now keeps revocations
    (ADR 0046), so the undo is the console's to do: the files written by a
    tool before the restart come back as they were."""
    d = browser
    ws = Path(console.workspace)
    (ws / "plan.txt").write_text("the owner's plan")
    before = _tree(ws)
    with console.client() as c:
        c.set_setting_text("tools.approve_from", "R4")  # the shell runs unasked
        keep = c.history(limit=1).entries[0].seq  # the setting: an entry the page lists
    console.model.script(
        Reply.answer(
            tool_calls=(
                ("c1", model_name("fs.write"), '{"path": "plan.txt", "content": "scrapped"}'),
                ("c2", model_name("fs.write"), '{"path": "new/a.txt", "content": "a"}'),
            )
        ),
        *_call("shell.run", '{"command": "rm plan.txt; echo b > b.txt"}', "rewrote it all"),
    )
    open_console(d, console)
    _say(d, "rewrite my plan")
    _wait(d, "the reply", lambda _: "rewrote it all" in _replies(d))
    assert not (ws / "plan.txt").exists()
    assert (ws / "new" / "a.txt").read_text() == "a"
    assert (ws / "b.txt").read_text() == "b\n"

    _restart(console)
    # The terminal's dry run says the restart's revocations stay.
    argv = [*naga_command(), "rollback", "--to", str(keep), "--dry-run", "--home", console.home]
    dry = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert dry.returncode == 0, dry.stderr
    assert "(a revocation is never lifted)" in dry.stdout, dry.stdout
    assert not [line for line in dry.stdout.splitlines() if "undoes" in line and "revoke" in line]
    said = subprocess.run(
        [*argv, "--json"], capture_output=True, text=True, timeout=60, check=False
    )
    kept = json.loads(said.stdout)["kept_seqs"]
    assert len(kept) >= 3, said.stdout  # fs, shell and web: their workers ended
    open_console(d, console)
    _click(d, '#pages button[data-page="rollback"]')
    _wait(
        d,
        "the entry to undo to",
        lambda _: _click(d, f'#page-rollback button.undo[data-seq="{keep}"]'),
    )
    _wait(d, "the dry run", lambda _: d.find_element("id", "preview").is_displayed())
    changes = _texts(d, "#preview-changes li")
    assert not [t for t in changes if "revocation" in t], changes
    stays = _texts(d, "#preview-words li.kept")
    assert len(stays) == len(kept), stays
    assert all("(a revocation is never lifted): revoke token" in t for t in stays), stays
    assert not [t for t in _texts(d, "#preview-words li.restored") if "revoke token" in t]
    assert d.find_element("id", "confirm-undo").get_attribute("disabled") is None
    d.find_element("id", "confirm-undo").click()
    _wait(
        d,
        "the files restored",
        lambda _: _tree(ws) == before or _refusal(d),
    )
    assert not _refusal(d)
    assert _tree(ws) == before
    with console.client() as c:
        c.reset_setting("tools.approve_from")


def test_naga_chat_through_the_gateway_says_a_call_failed(console: Console) -> None:
    """Found by hand: ``naga chat`` (through the gateway, as a console is
    running) printed ``[tool fs.write]`` for a refused call, and its --json
    listed no tools at all."""
    bad = '{"path": "../outside.txt", "content": "x"}'
    for _ in range(2):
        console.model.script(*_call("fs.write", bad, "could not"))
    argv = [*naga_command(), "chat", "--session", "chat-fail", "--home", console.home]
    done = subprocess.run(
        [*argv, "write outside"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    (failed,) = [line for line in done.stderr.splitlines() if "failed" in line]
    assert failed.startswith("[tool fs.write failed: "), failed
    assert "outside.txt" in failed, failed
    assert "could not" in done.stdout
    done = subprocess.run(
        [*argv, "--json", "again"], capture_output=True, text=True, timeout=120, check=False
    )
    said = json.loads(done.stdout)
    assert said["via"] == "gateway"
    (tool,) = said["tools"]
    assert tool["ok"] is False
    assert "outside.txt" in tool["error"]


def _tool_line(d: Any, name: str) -> str:
    (line,) = _texts(d, f'#page-plugins li[data-tool="{name}"]')
    return " ".join(line.split())


def test_the_plugins_page_says_which_tools_the_agent_is_offered_and_which_ask(
    console: Console, browser: Any
) -> None:
    """Found by hand on a fresh install: shell.run read "R3 network or money"
    (it has no network), web.fetch "R1 local, reversible" (a fetch is
    neither), and nothing said shell.run is not offered at tools.max_risk R2."""
    d = browser
    with console.client() as c:
        c.set_setting_text("tools.max_risk", "R2")
        try:
            open_console(d, console)
            _click(d, '#pages button[data-page="plugins"]')
            listed = '#page-plugins li[data-tool="fs.read"]'
            _wait(d, "the plugins page", lambda _: _texts(d, listed))
            shell = _tool_line(d, "shell.run")
            assert "not offered to the agent (tools.max_risk R2)" in shell, shell
            assert "asks you first" in shell, shell
            read = _tool_line(d, "fs.read")
            assert "not offered" not in read, read
            assert "asks you first" not in read, read
            assert "R1 low risk" in _tool_line(d, "web.fetch")
            page = " ".join(_texts(d, "#page-plugins"))
            assert "network or money" not in page
            assert "reversible" not in page
        finally:
            c.set_setting_text("tools.max_risk", "R3")  # as the module's fixture set it
