"""A plugin whose tools are all R0 (the owner approved reads only) gets its
work directory read-only, from inside its real sandboxed worker under a real
``naga daemon start --foreground``; an R2 plugin's stays writable."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from naga.sdk import Client
from naga_core.plugins import code_hash
from tests.daemon.conftest import CoreProcess, start_core_process
from tests.plugin_host.conftest import READY_S, data_dir

MANIFEST = """\
name = "{name}"
version = "1.0.0"
kind = "tool"
description = "Writes into its work directory (tests only)"
entry = "{name}:main"

[[tools]]
name = "{name}.scribble"
risk = "{risk}"
description = "Write a file into the work directory; say how it went"
"""

CODE = """\
import errno
import os

from naga_plugins import Plugin

plugin = Plugin("{name}")


@plugin.tool("{name}.scribble")
def scribble():
    try:
        fd = os.open(os.path.join(plugin.work_dir(), "scribbled"), os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    os.write(fd, b"written")
    os.close(fd)
    return "written"


main = plugin.main
"""

RISKS = {"reader": "R0", "writer": "R2"}


@dataclass
class Served:
    core: CoreProcess
    home: str
    client: Client


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    root = tempfile.mkdtemp(prefix="naga-r0-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    for name, risk in RISKS.items():
        folder = Path(home, "plugins", name)
        folder.mkdir(parents=True)
        (folder / "plugin.toml").write_text(MANIFEST.format(name=name, risk=risk))
        (folder / f"{name}.py").write_text(CODE.format(name=name))
    core = start_core_process(home, Path(root) / "core.log")
    try:
        with Client.connect(home) as client:
            for name in RISKS:
                folder = os.path.join(home, "plugins", name)
                client.install_plugin(folder, code_hash(folder))
            yield Served(core, home, client)
            client.shutdown("tests done")
        assert core.proc.wait(60) == 0, core.output()
    finally:
        if core.proc.poll() is None:
            core.proc.kill()
            core.proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _scribble(served: Served, name: str) -> object:
    info = served.client.enable_plugin(name, wait=READY_S).plugin
    assert info.pid > 0, (info, served.core.output()[-4000:])
    return served.client.invoke(name, f"{name}.scribble", {}, timeout=READY_S)


def test_an_r0_only_plugin_cannot_write_its_work_directory(served: Served) -> None:
    outcome = _scribble(served, "reader")
    assert outcome in {"EROFS", "EACCES"}, (outcome, served.core.output()[-4000:])
    assert not (data_dir(served.home, "reader") / "scribbled").exists()


def test_an_r2_plugin_still_writes_its_work_directory(served: Served) -> None:
    assert _scribble(served, "writer") == "written", served.core.output()[-4000:]
    scribbled = data_dir(served.home, "writer") / "scribbled"
    assert scribbled.read_bytes() == b"written"
