"""INV-4 single writer: only naga_core.ledger opens ledger files for writing.

A real workload (the CLI and the store: run, append, rebuild, recover,
verify, head, prove; and naga-core serving SetSetting and Rollback calls
from several client threads at once) runs in a child interpreter with an audit hook that sees
every ``open``/``os.open`` and ``sqlite3.connect``; each one under
``$NAGA_HOME/ledger`` that can write is attributed to the innermost project
module on the stack. Any writer outside ``naga_core.ledger`` fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

_HOOK = textwrap.dedent(
    """
    import json, os, sys

    LEDGER = os.path.join(os.environ["NAGA_HOME"], "ledger")
    WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    seen = []

    def project_module():
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name.split(".")[0] in ("naga", "naga_core", "naga_gateway", "naga_plugins",
                                      "sandbox", "rogue"):
                return name
            frame = frame.f_back
        return "?"

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if not isinstance(path, str) or not os.path.abspath(path).startswith(LEDGER):
                return
            writes = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and flags & WRITE
            )
            if writes:
                seen.append(["open", path, project_module()])
        elif event == "sqlite3.connect":
            path = str(args[0])
            if LEDGER in path:
                seen.append(["sqlite3.connect", path, project_module()])

    sys.addaudithook(hook)
    """
)

_WORKLOAD = textwrap.dedent(
    """
    from naga_core._home import Home
    from naga_core._store import open_ledger
    from naga_core.cli import main

    assert main(["run"]) == 0
    with open_ledger(Home.resolve(None), create=False) as ledger:
        for i in range(300):
            ledger.append("arch.test", b"x" * 200)
    for argv in (["ledger", "rebuild"], ["ledger", "recover"], ["ledger", "verify"],
                 ["ledger", "head"], ["ledger", "prove", "7"], ["run"]):
        assert main(argv) == 0, argv

    # The core daemon: concurrent clients, every write through its one loop.
    import threading, trio
    from naga.sdk import Client
    from naga_core.daemon import CoreConfig, serve_core

    ready = threading.Event()

    def serve():
        async def main():
            async with trio.open_nursery() as nursery:
                await nursery.start(serve_core, CoreConfig(Home.resolve(None)))
                ready.set()
        trio.run(main)

    core = threading.Thread(target=serve)
    core.start()
    assert ready.wait(60), "the core did not start"

    def client(n):
        with Client.connect() as c:
            for i in range(20):
                c.set_setting("agent.max_steps", 1 + (n * 20 + i) % 100)
    writers = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for w in writers: w.start()
    for w in writers: w.join()
    with Client.connect() as c:
        c.rollback(300)
        c.shutdown("done")
    core.join()
    """
)

_ROGUE = textwrap.dedent(
    """
    import os, types
    rogue = types.ModuleType("rogue")
    exec(compile(
        "def write(home):\\n"
        "    with open(os.path.join(home, 'ledger', 'segments', 'x.tmp'), 'wb') as f:\\n"
        "        f.write(b'x')\\n",
        "rogue.py", "exec"), rogue.__dict__)
    rogue.os = os
    os.makedirs(os.path.join(os.environ["NAGA_HOME"], "ledger", "segments"), exist_ok=True)
    rogue.write(os.environ["NAGA_HOME"])
    os.remove(os.path.join(os.environ["NAGA_HOME"], "ledger", "segments", "x.tmp"))
    """
)

_REPORT = "\nprint(json.dumps(seen))\n"


def _writers(tmp_path: Path, workload: str) -> list[list[str]]:
    home = tmp_path / "home"
    env = {**os.environ, "NAGA_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-c", _HOOK + workload + _REPORT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_only_the_ledger_package_writes_ledger_files(tmp_path: Path) -> None:
    seen = _writers(tmp_path, _WORKLOAD)
    assert seen, "the audit hook saw no ledger writes at all: the test is blind"
    outsiders = [s for s in seen if not s[2].startswith("naga_core.ledger.")]
    assert not outsiders, f"ledger files opened for writing outside naga_core.ledger: {outsiders}"
    kinds = {s[0] for s in seen}
    assert kinds == {"open", "sqlite3.connect"}, kinds


def test_the_check_catches_a_writer_outside_the_ledger(tmp_path: Path) -> None:
    seen = _writers(tmp_path, _ROGUE)
    assert [s[2] for s in seen] == ["rogue"]
