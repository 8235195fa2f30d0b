"""A real ``naga daemon start --foreground`` process, its default
supervision, and a hostile plugin installed in its home: the penetration
attacks of tests/sandbox/_attacks.py run inside the sandboxed plugin worker
and must be refused, or end only that worker, while the core keeps
answering, its private files stay untouched and its ledger verifies. And
the owner's view of it: ``naga plugin ...`` and ``naga daemon status
--json``, with every non-core process under seccomp and no_new_privs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from naga.sdk import Client
from naga.sdk import errors as sdk_errors
from naga.v1 import plugin_service_pb2 as spb
from naga_core.cli import main
from naga_core.plugins import code_hash
from tests.daemon.conftest import CoreProcess, start_core_process
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import PLUGINS, READY_S, fails

#: The core's private files (relative to its home) that no attack may touch.
PRIVATE = ("keys/ledger.key", "keys/token.key", "run/owner.token")


NETTY = """\
name = "netty"
version = "1.0.0"
kind = "tool"
description = "Connects where its manifest allows (tests only)"
entry = "tests.plugin_host._netty:main"

[[egress]]
host = "127.0.0.1"
port = {port}

[[tools]]
name = "netty.connect"
risk = "R1"
description = "TCP connect to 127.0.0.1:port"
[tools.params.port]
type = "integer"
minimum = 1
maximum = 65535
"""


@dataclass
class Served:
    core: CoreProcess
    home: str
    client: Client
    digests: dict[str, str]
    #: A listener whose port the netty plugin's manifest declares.
    egress: socket.socket

    def assert_intact(self) -> None:
        assert self.core.proc.poll() is None, self.core.output()
        state = Path(f"/proc/{self.core.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state in ("S", "R"), f"core state {state}"
        assert self.client.status().processes[0].pid == self.core.pid
        assert _digests(self.home) == self.digests


def _digests(home: str) -> dict[str, str]:
    return {rel: hashlib.sha256(Path(home, rel).read_bytes()).hexdigest() for rel in PRIVATE}


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    root = tempfile.mkdtemp(prefix="naga-x-")
    home = os.path.join(root, "home")
    os.makedirs(os.path.join(home, "plugins", "attacker"), mode=0o700)
    os.chmod(home, 0o700)
    # Installed as an owner installs one: a directory under $NAGA_HOME/plugins.
    shutil.copy(PLUGINS / "attacker" / "plugin.toml", os.path.join(home, "plugins", "attacker"))
    egress = socket.create_server(("127.0.0.1", 0))
    os.makedirs(os.path.join(home, "plugins", "netty"))
    Path(home, "plugins", "netty", "plugin.toml").write_text(
        NETTY.format(port=egress.getsockname()[1])
    )
    core = start_core_process(home, Path(root) / "core.log")
    try:
        with Client.connect(home) as client, egress:
            # A folder copied in runs only once the owner installed it.
            for name in ("attacker", "netty"):
                folder = os.path.join(home, "plugins", name)
                client.install_plugin(folder, code_hash(folder), local_network=name == "netty")
            info = client.enable_plugin("attacker", wait=READY_S).plugin
            assert info.pid > 0, info
            yield Served(core, home, client, _digests(home), egress)
            client.shutdown("tests done")
        assert core.proc.wait(60) == 0, core.output()
        assert "Traceback" not in core.output(), core.output()
        verify_home(home)
    finally:
        if core.proc.poll() is None:
            core.proc.kill()
            core.proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _attack(served: Served, name: str, *args: str) -> object:
    return served.client.invoke(
        "attacker", "attacker.attack", {"name": name, "args": "\n".join(args)}, timeout=30
    )


def _refusals(served: Served) -> dict[str, tuple[tuple[str, ...], str]]:
    home, pid = served.home, str(served.core.pid)
    return {
        "read /etc/passwd": (("read_etc_passwd",), "ENOENT"),
        "read the core's keys and credential": (
            ("read_core_keys", *(os.path.join(home, rel) for rel in PRIVATE)),
            "ENOENT,ENOENT,ENOENT",
        ),
        # The home is in the view only as the read-only scaffold above the
        # worker's directories: nothing of it is there, and nothing can be made.
        "write into the core's home and /tmp": (("write_outside", home), "EROFS,EROFS"),
        "connect to the core's socket": (
            ("unix_connect", os.path.join(home, "run", "core.sock")),
            "ENOENT",
        ),
        "signal the core": (("kill_sentinel", pid), "EPERM,EPERM"),
        "SIGIO at the core": (("sigio_sentinel", pid), "EPERM,EPERM"),
        "fork bomb": (("fork_bomb",), "EPERM"),
        "new namespaces": (("unshare_user",), "EPERM"),
        "executable memory": (("mprotect_exec",), "EPERM,EPERM"),
        "raise its limits": (("raise_rlimits",), "EPERM,EPERM"),
        "bpf": (("kernel_surface", "bpf"), "EPERM"),
        "io_uring": (("kernel_surface", "io_uring_setup"), "EPERM"),
        "disk fill": (("disk_fill",), "EFBIG"),
    }


def test_attacks_from_a_plugin_are_refused_and_the_core_serves_on(served: Served) -> None:
    first = served.client.plugins()
    pid = next(p.pid for p in first if p.name == "attacker")
    for what, (attack, expected) in _refusals(served).items():
        assert _attack(served, *attack) == expected, what
        served.assert_intact()
    # All in one worker: refused attempts cost the plugin nothing.
    after = next(p for p in served.client.plugins() if p.name == "attacker")
    assert (after.pid, after.restarts) == (pid, 0)


def test_network_attacks_from_a_plugin_are_refused(served: Served) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        tcp.setblocking(False)
        assert _attack(served, "tcp_connect", str(tcp.getsockname()[1])) == "EPERM"
        with pytest.raises(BlockingIOError):
            tcp.accept()
    name = f"naga-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as abstract:
        abstract.bind("\0" + name)
        abstract.listen()
        assert _attack(served, "abstract_connect", name) == "ECONNREFUSED"
    served.assert_intact()


@pytest.mark.parametrize("attack", ["ptrace_sentinel", "process_vm_readv_sentinel"])
def test_reaching_into_the_core_kills_only_the_plugin(served: Served, attack: str) -> None:
    failure = fails(_attack, served, attack, str(served.core.pid))
    assert isinstance(failure, sdk_errors.PluginUnavailable), failure
    assert "killed by the seccomp filter" in str(failure)
    served.assert_intact()
    answer = served.client.invoke("attacker", "attacker.echo", {"text": "up"}, timeout=READY_S)
    assert isinstance(answer, dict)
    assert answer["text"] == "up"


def test_a_memory_bomb_is_contained(served: Served) -> None:
    # Whichever comes first: the address-space limit (MemoryError inside the
    # worker) or the supervisor's memory ceiling (the worker is killed).
    try:
        outcome = str(_attack(served, "memory_bomb"))
    except sdk_errors.PluginUnavailable as exc:
        outcome = str(exc)
    assert outcome == "MemoryError" or "memory ceiling exceeded" in outcome, outcome
    served.assert_intact()
    answer = served.client.invoke("attacker", "attacker.echo", {"text": "up"}, timeout=READY_S)
    assert isinstance(answer, dict)


def test_descriptor_exhaustion_stays_inside_the_plugin(served: Served) -> None:
    # Last of the refusals: the worker keeps its descriptors used up.
    assert _attack(served, "fd_exhaustion") == "EMFILE"
    served.assert_intact()


def test_an_egress_plugin_reaches_its_declared_port_only(served: Served) -> None:
    info = served.client.enable_plugin("netty", wait=READY_S).plugin
    assert info.state == spb.PLUGIN_STATE_RUNNING, info  # cap:net is present (Landlock ABI >= 4)
    declared = served.egress.getsockname()[1]
    assert served.client.invoke("netty", "netty.connect", {"port": declared}) == "connected"
    served.egress.accept()[0].close()
    with socket.create_server(("127.0.0.1", 0)) as other:
        other.setblocking(False)
        port = other.getsockname()[1]
        assert served.client.invoke("netty", "netty.connect", {"port": port}) == "EACCES"
        with pytest.raises(BlockingIOError):
            other.accept()
    served.client.disable_plugin("netty")
    served.assert_intact()


# --- the owner's view ----------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], home: str, *argv: str) -> tuple[int, Any]:
    capsys.readouterr()
    code = main([*argv, "--home", home, "--json"])
    out, _ = capsys.readouterr()
    return code, json.loads(out)


def test_cli_plugin_commands_and_daemon_status(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    home = served.home
    code, listed = _cli(capsys, home, "plugin", "list")
    assert code == 0
    names = {p["name"]: p for p in listed["plugins"]}
    assert {"attacker", "clock", "notes"} <= set(names)
    assert names["clock"]["state"] == "disabled"
    assert names["clock"]["tools"] == [{"name": "clock.now", "risk": "R0"}]
    assert names["attacker"]["shipped"] is False

    code, enabled = _cli(capsys, home, "plugin", "enable", "clock")
    assert code == 0, enabled
    assert enabled["changed"] is True
    assert enabled["plugin"]["state"] == "running"

    code, called = _cli(capsys, home, "plugin", "call", "clock", "clock.now", '{"timezone":"UTC"}')
    assert code == 0
    assert called["result"]["timezone"] == "UTC"

    code, status = _cli(capsys, home, "daemon", "status")
    assert code == 0
    roles = {p["role"]: p for p in status["processes"]}
    assert roles["core"]["pid"] == served.core.pid
    for role in ("plugin:clock", "plugin:attacker"):
        row = roles[role]
        assert row["state"] == "running"
        assert row["pid"] > 0
        # Every process but the core is under the filter and no_new_privs.
        proc = Path(f"/proc/{row['pid']}/status").read_text()
        assert "Seccomp:\t2\n" in proc, role
        assert "NoNewPrivs:\t1\n" in proc, role
    core_proc = Path(f"/proc/{served.core.pid}/status").read_text()
    assert "Seccomp:\t0\n" in core_proc

    code, disabled = _cli(capsys, home, "plugin", "disable", "clock")
    assert code == 0
    assert disabled["plugin"]["state"] == "disabled"
    code, history = _cli(capsys, home, "history", "--limit", "50")
    what = [e["description"] for e in history["entries"]]
    assert "enable component plugin.clock" in what
    assert "disable component plugin.clock" in what


def test_cli_refusals_say_why(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _cli(capsys, served.home, "plugin", "enable", "nope")
    assert code == 1
    assert "no plugin named 'nope' is installed" in doc["error"]
    code, doc = _cli(capsys, served.home, "plugin", "call", "clock", "clock.now", "{")
    assert code == 1
    assert "plugin clock is disabled" in doc["error"]
