"""Each plugin worker in a cgroup of its own (issue 11; sandbox/_cgroup.py,
docs/adr/0031-sec-cgroups.md): a hard CPU quota the kernel holds within
every 100 ms period however many threads spin, and a memory ceiling.

Before, CPU share was the supervisor's windowed check (``cpu_share`` over
``cpu_window_s``) plus a renice: until the window closed, a worker's
threads could take every core. Here the real hostile plugin, under a real
core's plugin host whose windowed check is set never to fire, spins three
threads against a quota of 0.05 CPUs. Skipped, saying why, where this
machine offers no cgroup to the core (``naga doctor`` says so too)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import sandbox
from naga.sdk import Client
from naga_core.plugins import PluginsConfig
from naga_core.supervisor import WorkerTuning
from tests.agent.conftest import AGENT, ServerThread, final, model_server, running_core, turn
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply
from tests.plugin_host._hostile import MANIFEST
from tests.plugin_host.conftest import READY_S

__all__ = ["model_server"]  # the fixture, used by name below

_MIB = 1 << 20
SUPPORT = sandbox.detect_cgroups()
pytestmark = pytest.mark.skipif(not SUPPORT.usable, reason=SUPPORT.line())

#: Small: on a machine shared by many test runs a worker niced 10 steps gets
#: a tenth of a CPU or so, and the quota must bite even then.
QUOTA = 0.05
THROTTLED = WorkerTuning(
    # The windowed check never fires here: the quota alone must hold.
    cpu_share=64.0,
    cpu_window_s=600.0,
    cpu_max=QUOTA,
    memory_bytes=128 * _MIB,
    max_threads=32,
    # At 0.05 CPUs its interpreter's start takes seconds.
    launch_timeout_s=90.0,
    hello_timeout_s=90.0,
)


@dataclass
class Served:
    home: str
    client: Client


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    root = tempfile.mkdtemp(prefix="naga-cg-")
    home = os.path.join(root, "home")
    plugins = Path(root, "plugins", "hostile")
    plugins.mkdir(parents=True)
    with socket.create_server(("127.0.0.1", 0)) as egress:
        plugins.joinpath("plugin.toml").write_text(MANIFEST.format(port=egress.getsockname()[1]))
        config = PluginsConfig(roots=(str(plugins.parent),), tuning=THROTTLED)
        try:
            with core_in_thread(home, plugins=config) as core, core.client() as client:
                yield Served(home, client)
                client.shutdown("tests done")
                core.join()
        finally:
            shutil.rmtree(root, ignore_errors=True)


def _cgroup_dirs(pid: int) -> dict[str, Path]:
    """controller -> the directory of ``pid``'s cgroup (v1: per controller)."""
    found: dict[str, Path] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            if name in ("cpu", "memory", ""):
                found[name] = Path(path)
    parents = {"cpu": SUPPORT.cpu_parent, "memory": SUPPORT.memory_parent}
    dirs: dict[str, Path] = {}
    for controller, parent in parents.items():
        assert parent is not None
        rel = found["" if SUPPORT.version is sandbox.CgroupVersion.V2 else controller]
        dirs[controller] = Path(parent) / rel.name
    return dirs


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wall_seconds_of(client: Client, seconds: float) -> float:
    """Let the worker run ``seconds`` (its own wait tool): the window measured."""
    import time

    start = time.monotonic()
    client.invoke("hostile", "hostile.wait", {"seconds": seconds}, timeout=READY_S + seconds)
    return time.monotonic() - start


def test_spinning_threads_are_held_to_the_cpu_quota(served: Served) -> None:
    info = served.client.enable_plugin("hostile", wait=READY_S).plugin
    assert info.pid > 0, info
    dirs = _cgroup_dirs(info.pid)
    v2 = SUPPORT.version is sandbox.CgroupVersion.V2
    cpu, memory = dirs["cpu"], dirs["memory"]
    assert cpu.parent == Path(str(SUPPORT.cpu_parent)), cpu  # its own, under the core's
    assert cpu.name.startswith("naga-plugin-hostile-"), cpu
    if v2:
        assert (cpu / "cpu.max").read_text().split() == [str(round(QUOTA * 100_000)), "100000"]
        assert int((memory / "memory.max").read_text()) == 2 * THROTTLED.memory_bytes
    else:
        assert int((cpu / "cpu.cfs_quota_us").read_text()) == round(QUOTA * 100_000)
        assert int((cpu / "cpu.cfs_period_us").read_text()) == 100_000
        assert int((memory / "memory.limit_in_bytes").read_text()) == 2 * THROTTLED.memory_bytes
        # Its own group beside the core, never all workers in one shared
        # group (v1 weighs a group as one task against the tasks beside it).
        assert cpu.parent == Path(str(SUPPORT.cpu_parent))

    for _ in range(3):
        assert served.client.invoke("hostile", "hostile.spin", {}, timeout=READY_S)
    before = _cpu_seconds(info.pid)
    wall = _wall_seconds_of(served.client, 4.0)
    used = _cpu_seconds(info.pid) - before
    # Three spinning threads (one GIL) would use a whole CPU, less only as
    # far as load takes it; the quota holds them to 0.05, plus a period's slack.
    assert used <= QUOTA * wall * 1.2 + 0.1, (used, wall)
    stat = dict(line.split() for line in (cpu / "cpu.stat").read_text().splitlines())
    assert int(stat["nr_throttled"]) > 0, (stat, used, wall)

    # The worker still answers (throttled, not stopped), and the cgroup goes with it.
    assert served.client.invoke("hostile", "hostile.token", {}, timeout=READY_S)
    served.client.disable_plugin("hostile")
    assert not cpu.exists()
    assert not memory.exists()


def test_executors_and_the_model_provider_get_a_cgroup_each(model_server: ServerThread) -> None:
    model_server.script(Reply.answer("hello"))
    with running_core(model_server, AGENT, plugins=()) as core, core.client() as c:
        assert final(turn(c, "s-cgroup", "hi")).text == "hello"
        rows = [p for p in c.status().processes if p.pid > 0]
        labels = {p.role: _cgroup_dirs(p.pid)["cpu"].name for p in rows}
    executors = [name for role, name in labels.items() if role.startswith("executor")]
    assert executors, labels
    assert all(name.startswith("naga-executor-") for name in executors), labels
    assert any(name.startswith("naga-model-provider-") for name in labels.values()), labels
    assert len(set(labels.values())) == len(labels), labels  # one each, never shared
