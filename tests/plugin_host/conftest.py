"""A real core (in a thread of the test process) hosting the test plugins in
tests/plugin_host/plugins, with small supervision numbers so that a crash,
a hang or a leak is seen and rebuilt within a second or two."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga.v1 import plugin_service_pb2 as spb
from naga_core.plugins import PluginsConfig
from naga_core.supervisor import RestartPolicy, WorkerTuning
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.ledger_helpers import verify_home

PLUGINS = Path(__file__).resolve().parent / "plugins"

FAST = WorkerTuning(
    heartbeat_s=0.2,
    # The hang tests need a hang found before a call's timeout (3 s).
    heartbeat_timeout_s=1.0,
    health_s=0.05,
    shutdown_grace_s=1.0,
    eof_grace_s=0.5,
    restart=RestartPolicy(backoff_s=0.05, backoff_max_s=0.2, loop_failures=3, loop_window_s=60),
)
#: For tests that are not about hangs: on a loaded two-core box (load 15, a
#: fork bomb in a shell test beside it) a healthy executor missed a 1 s Pong
#: and was rebuilt mid-turn.
STEADY = dataclasses.replace(FAST, heartbeat_timeout_s=4.0)
#: Long enough for a cold worker on a loaded two-core machine.
READY_S = 30.0


@pytest.fixture(scope="module")
def host_core() -> Iterator[InProcessCore]:
    """One core per module, shut down and its ledger verified at the end."""
    root = tempfile.mkdtemp(prefix="naga-p-")
    home = root + "/home"
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=FAST)
    try:
        with core_in_thread(home, plugins=config) as core:
            yield core
            with core.client() as c:
                c.shutdown("tests done")
            assert not core.join().failed
        verify_home(home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def client(host_core: InProcessCore) -> Iterator[Client]:
    with host_core.client() as c:
        yield c


def fresh(client: Client, name: str) -> spb.PluginInfo:
    """``name`` enabled with a new worker (no restarts, no failure history)."""
    client.disable_plugin(name)
    info = client.enable_plugin(name, wait=READY_S).plugin
    assert info.state == spb.PLUGIN_STATE_RUNNING, info
    assert info.pid > 0
    return info


def plugin(client: Client, name: str) -> spb.PluginInfo:
    (found,) = (p for p in client.plugins() if p.name == name)
    return found


def fails(fn: object, *args: object, **kwargs: object) -> SdkError:
    """The SdkError the call raises (the test fails if it returns)."""
    assert callable(fn)
    try:
        fn(*args, **kwargs)
    except SdkError as exc:
        return exc
    raise AssertionError(f"{fn} returned instead of failing")


def history_text(client: Client, limit: int = 200) -> list[str]:
    return [e.description for e in client.history(limit=limit).entries]


def data_dir(home: str, name: str) -> Path:
    """The work directory of home plugin ``name`` as installed now: its
    install's (``work/plugins/<name>@...``), never one named by the name
    alone (naga_core.plugins._data)."""
    found = sorted(Path(home, "work", "plugins").glob(f"{name}@*"))
    assert len(found) == 1, found
    return found[0]
