"""No input makes the CLI print a traceback. The commands are found by
walking the parser (so commands other branches add are fuzzed too); each
is fed no arguments, empty ones and bad ones, once with no core and once
against a real core (only the model is a fake)."""

from __future__ import annotations

import argparse
import io
import os
import signal
import socket
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from naga_core.cli import main
from naga_core.cli._main import build_parser
from tests.agent.conftest import ServerThread, model_server, write_providers
from tests.daemon.conftest import CoreProcess, start_core_process

__all__ = ["model_server"]  # the fixture, used by name

#: Values that break most rules: empty, blank, negative, huge, not UTF-8
#: friendly, a path that is not there, JSON that is not an object.
BAD = ["", " ", "-1", "99999999999999999999999", "nosuch", "x" * 300, "\x7f\u2028é", "[]"]
#: Leaves that, given no bad input at all, would start, stop or install a
#: core: fed only their bad option values.
ACTING = {
    ("daemon", "start"),
    ("daemon", "stop"),
    ("daemon", "install"),
    ("daemon", "restart-gateway"),
}


def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if not a.option_strings and isinstance(a.choices, dict)]  # pyright: ignore[reportPrivateUsage]
    if not subs:
        yield path, parser
        return
    children = cast("dict[str, argparse.ArgumentParser]", subs[0].choices)
    for name, child in children.items():
        yield from _leaves(child, (*path, name))


def _vectors(path: tuple[str, ...], leaf: argparse.ArgumentParser) -> Iterator[list[str]]:
    positionals = [
        a
        for a in leaf._actions
        if not a.option_strings and a.dest != "help"  # pyright: ignore[reportPrivateUsage]
    ]
    valued = [
        a.option_strings[-1]
        for a in leaf._actions  # pyright: ignore[reportPrivateUsage]
        if a.option_strings and a.nargs != 0 and a.dest not in ("help", "home", "ready_fd")
    ]
    if path not in ACTING:
        yield []
        for bad in BAD:
            yield [bad] * len(positionals)
            yield [bad] * (len(positionals) + 1)
    fill = ["x"] * len(positionals)
    for opt in valued:
        for bad in BAD[:4]:
            yield [*fill, opt, bad]


def _all() -> list[list[str]]:
    return [[*path, *vec] for path, leaf in _leaves(build_parser()) for vec in _vectors(path, leaf)]


def _run(argv: list[str], home: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run one command line in-process; what it wrote to stderr. Fails on
    any exception that escapes main (argparse's SystemExit aside)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    try:
        code = main([*argv, "--home", home])
    except SystemExit as exc:
        code = exc.code
    except Exception:  # noqa: BLE001 - what the fuzz looks for
        pytest.fail(f"naga {argv!r} raised:\n{traceback.format_exc()}")
    finally:
        monkeypatch.undo()
    assert isinstance(code, int), (argv, code)
    said = err.getvalue()
    assert "Traceback" not in said, (argv, said)
    return said


def test_the_parser_has_commands_to_fuzz() -> None:
    paths = {tuple(v[:2]) for v in _all()}
    assert ("chat",) in {p[:1] for p in paths}
    assert len(_all()) > 200


def test_no_input_gives_a_traceback_without_a_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.chdir(tmp_path)  # files a command may write land here
    for argv in _all():
        _run(argv, str(home), monkeypatch)
        monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def core(
    tmp_path_factory: pytest.TempPathFactory, model_server: ServerThread
) -> Iterator[CoreProcess]:
    tmp = tmp_path_factory.mktemp("cli-fuzz")
    home = tmp / "home"
    home.mkdir(mode=0o700)
    write_providers(str(home), model_server.server.openai_url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = start_core_process(str(home), tmp / "core.log", gateway_port=port)
    try:
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.proc.wait(60) == 0, proc.output()[-3000:]


@pytest.mark.slow
def test_no_input_gives_a_traceback_against_a_real_core(
    core: CoreProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for argv in _all():
        if argv[:1] == ["rollback"]:
            continue  # undoing the ledger would undo this test's core set-up
        _run(argv, core.home, monkeypatch)
        monkeypatch.chdir(tmp_path)
    assert core.proc.poll() is None, "the core died:\n" + core.output()[-3000:]
