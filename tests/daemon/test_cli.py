"""``naga daemon | history | rollback | config | trust`` against a real,
detached core; and what every command says when no core runs."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from naga_core._home import Home
from naga_core._store import open_ledger
from naga_core.agent import SHIPPED_TOOLS
from naga_core.cli import main

STATE_CHANGING = [
    ["rollback", "--to", "0"],
    ["config", "set", "agent.max_steps", "3"],
    ["config", "reset", "agent.max_steps"],
    ["trust", "set", "wechat:bob", "known"],
    ["daemon", "restart-gateway"],
]
READING = [["history"], ["config", "list"], ["config", "get", "agent.max_steps"], ["trust", "show"]]


class Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str], home: str) -> None:
        self._capsys = capsys
        self.home = home

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code = main([*argv, "--home", self.home])
        out, err = self._capsys.readouterr()
        return code, out, err

    def json(self, *argv: str) -> tuple[int, Any]:
        code, out, _ = self(*argv, "--json")
        return code, json.loads(out)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], home: str) -> Cli:
    return Cli(capsys, home)


@pytest.mark.parametrize("argv", STATE_CHANGING + READING, ids=" ".join)
def test_without_a_core_commands_say_how_to_start_it(cli: Cli, argv: list[str]) -> None:
    code, out, err = cli(*argv)
    assert code == 1
    assert out == ""
    assert "naga-core is not running" in err
    assert "start it with: naga daemon start" in err
    # Nothing was done in-process: not even a home was made.
    assert not os.path.exists(cli.home)


def test_daemon_status_and_stop_without_a_core(cli: Cli) -> None:
    code, doc = cli.json("daemon", "status")
    assert code == 3
    assert doc == {"running": False, "processes": []}
    code, out, _ = cli("daemon", "stop")
    assert code == 0
    assert out == "naga-core is not running\n"


def test_a_detached_start_that_fails_shows_the_log_tail(cli: Cli) -> None:
    # An offline command holds the ledger: the core cannot open it and exits.
    with open_ledger(Home(cli.home), create=True):
        code, out, err = cli("daemon", "start", "--no-gateway")
    assert code == 1
    assert out == ""
    assert "naga-core exited before serving (exit status 1)" in err
    assert "the end of " + os.path.join(cli.home, "run", "core.log") in err
    # The core's own one-line error, from its log (no traceback).
    assert "naga: ledger at " in err
    assert "is held by another process" in err
    assert "Traceback" not in err
    assert cli("daemon", "status")[0] == 3


def test_the_owner_drives_a_detached_core(cli: Cli) -> None:
    code, out, err = cli("daemon", "start", "--no-gateway")
    assert code == 0, err
    assert "naga-core started (pid " in out
    try:
        _drive(cli)
    finally:
        code, out, err = cli("daemon", "stop")
    assert code == 0, err
    assert out.startswith("naga-core stopped (pid ")
    assert cli("daemon", "status")[0] == 3
    code, out, _ = cli("ledger", "verify")
    assert code == 0
    assert "ledger verified" in out
    log = os.path.join(cli.home, "run", "core.log")
    assert oct(os.stat(log).st_mode & 0o777) == oct(0o600)
    with open(log) as f:
        assert "naga-core stopping: Shutdown by owner: naga daemon stop" in f.read()


def _drive(cli: Cli) -> None:
    code, st = cli.json("daemon", "status")
    assert code == 0
    proc = st["processes"][0]
    assert proc["role"] == "core"
    # The rest are the shipped tools a fresh install enables and the agent's
    # warm executors (no provider is configured).
    assert [p["role"] for p in st["processes"][1:]] == [
        *(f"plugin:{name}" for name in SHIPPED_TOOLS),
        "executor:0",
        "executor:1",
    ]
    assert proc["state"] == "running"
    pid = proc["pid"]
    assert pid > 0
    code, out, _ = cli("daemon", "start", "--no-gateway")
    assert (code, out) == (0, f"naga-core is already running (pid {pid}) on {st['socket']}\n")

    # The first start's records end once each tool's worker runs (its token is minted first).
    for name in SHIPPED_TOOLS:
        assert cli("plugin", "enable", name)[0] == 0
    base = cli.json("ledger", "head")[1]["size"]
    code, out, _ = cli("config", "set", "agent.max_steps", "40")
    assert code == 0
    assert out.splitlines() == [
        "agent.max_steps = 40  (set; an integer in 1..100)",
        f"  ledger entry {base}; takes effect from the next turn",
    ]
    code, out, err = cli("config", "set", "agent.max_steps", "400")
    assert code == 1
    assert "must be an integer in 1..100" in err
    assert cli.json("config", "get", "agent.max_steps")[1]["value"] == 40
    assert cli("trust", "set", "wechat:bob", "known", "--reason", "friend")[0] == 0
    assert cli.json("trust", "show")[1]["entries"] == [
        {"peer": "wechat:bob", "level": "known", "explicit": True}
    ]

    code, hist = cli.json("history", "--limit", "5")
    assert code == 0
    assert [(e["seq"], e["form"]) for e in hist["entries"][:2]] == [
        (base + 1, "register"),
        (base, "register"),
    ]
    code, dry = cli.json("rollback", "--to", str(base), "--dry-run")
    assert code == 0
    assert dry["seq"] is None
    assert dry["changes"] == [
        {
            "family": "trust",
            "key": "wechat:bob",
            "before": "known",
            "after": None,
            "words": "remove wechat:bob from the trust table",
        }
    ]
    code, out, _ = cli("rollback", "--to", str(base), "--yes")
    assert code == 0
    assert out.startswith(f"rolled back to {base}: undid 1 effect(s) as ledger entry {base + 2}")
    assert cli.json("trust", "show")[1]["entries"] == []

    code, head = cli.json("ledger", "head")
    assert code == 0
    assert head["size"] == base + 3
    assert head["via"] == "naga-core"
    code, proof = cli.json("ledger", "prove", str(base + 1))
    assert code == 0
    assert proof["tree_size"] == base + 3
    code, _, err = cli("ledger", "verify")
    assert code == 1
    assert f"naga-core (pid {pid}) is running and owns the ledger" in err
