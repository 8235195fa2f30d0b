"""Hot plug while the core runs: enable, disable and replace are effects in
the ledger that a rollback undoes, and bind -> unbind -> rebind of one
plugin restarts nothing else."""

from __future__ import annotations

import os
import select

import pytest

from naga.sdk import Client
from naga.sdk import errors as sdk_errors
from naga.v1 import plugin_service_pb2 as spb
from tests.plugin_host.conftest import READY_S, fails, history_text, plugin


def _gone(pid: int, timeout: float = READY_S) -> bool:
    """Whether process ``pid`` has ended (waiting up to ``timeout`` on its pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def _worker_pids(client: Client) -> dict[str, int]:
    return {p.role: p.pid for p in client.status().processes}


def test_bind_unbind_rebind_restarts_nothing_else(client: Client) -> None:
    clock = client.enable_plugin("clock", wait=READY_S).plugin
    notes = client.enable_plugin("notes", wait=READY_S).plugin
    assert clock.state == notes.state == spb.PLUGIN_STATE_RUNNING
    client.invoke("notes", "notes.write", {"title": "kept", "text": "across rebinds"})

    off = client.disable_plugin("notes")
    assert off.changed
    assert off.plugin.state == spb.PLUGIN_STATE_DISABLED
    assert _gone(notes.pid)
    assert "plugin:notes" not in _worker_pids(client)
    refused = fails(client.invoke, "notes", "notes.list")
    assert isinstance(refused, sdk_errors.FailedPrecondition)
    assert "plugin notes is disabled" in str(refused)

    on = client.enable_plugin("notes", wait=READY_S).plugin
    assert on.state == spb.PLUGIN_STATE_RUNNING
    assert on.pid != notes.pid
    # The work directory outlives the worker; nothing else was restarted.
    assert client.invoke("notes", "notes.read", {"title": "kept"}) == {
        "title": "kept",
        "text": "across rebinds",
    }
    pids = _worker_pids(client)
    assert pids["plugin:clock"] == clock.pid
    assert pids["core"] == os.getpid()
    assert plugin(client, "clock").restarts == 0
    history = history_text(client)
    assert "disable component plugin.notes" in history
    assert "enable component plugin.notes" in history
    client.disable_plugin("clock")
    client.disable_plugin("notes")


def test_enable_and_disable_twice_change_nothing(client: Client) -> None:
    assert client.enable_plugin("clock", wait=READY_S).changed
    size = client.head().size
    assert not client.enable_plugin("clock", wait=READY_S).changed
    assert client.disable_plugin("clock").changed
    after = client.head().size
    assert not client.disable_plugin("clock").changed
    assert client.head().size == after > size


def test_rolling_back_an_enable_stops_the_plugin(client: Client) -> None:
    clock = client.enable_plugin("clock", wait=READY_S).plugin
    before = client.head().size
    greeter = client.enable_plugin("greeter", wait=READY_S).plugin
    assert greeter.state == spb.PLUGIN_STATE_RUNNING
    assert client.invoke("greeter", "greeter.greet", {"name": "ada"}) == "bonjour ada"

    done = client.rollback(before - 1, by_owner=True)

    after = plugin(client, "greeter")
    assert not after.enabled
    assert after.state == spb.PLUGIN_STATE_DISABLED
    assert _gone(greeter.pid)
    assert _worker_pids(client)["plugin:clock"] == clock.pid  # untouched
    # Rolling back the rollback brings it back.
    client.rollback(done.seq - 1, by_owner=True)
    again = client.enable_plugin("greeter", wait=READY_S)
    assert not again.changed  # already enabled again by the second rollback
    assert again.plugin.state == spb.PLUGIN_STATE_RUNNING
    assert client.invoke("greeter", "greeter.greet", {"name": "ada"}) == "bonjour ada"
    client.disable_plugin("greeter")
    client.disable_plugin("clock")


def test_replace_runs_the_other_version_and_a_rollback_brings_the_old_back(
    client: Client,
) -> None:
    first = client.enable_plugin("greeter", wait=READY_S).plugin
    assert list(first.versions) == ["1.0.0", "2.0.0"]
    assert first.version == "2.0.0"  # the newest, unless one is selected
    before = client.head().size

    swapped = client.replace_plugin("greeter", "1.0.0", wait=READY_S)
    assert swapped.previous_version == "2.0.0"
    assert swapped.plugin.version == "1.0.0"
    assert swapped.plugin.state == spb.PLUGIN_STATE_RUNNING
    assert client.invoke("greeter", "greeter.greet", {"name": "ada"}) == "hello ada"
    assert _gone(first.pid)
    assert "select plugin greeter 1.0.0 (was 2.0.0)" in history_text(client)

    client.rollback(before - 1, by_owner=True)

    back = plugin(client, "greeter")
    assert back.version == "2.0.0"
    assert back.enabled
    answer = client.invoke("greeter", "greeter.greet", {"name": "ada"}, timeout=READY_S)
    assert answer == "bonjour ada"
    client.disable_plugin("greeter")


def test_replace_with_a_version_not_installed_is_refused(client: Client) -> None:
    refused = fails(client.replace_plugin, "greeter", "9.9.9")
    assert isinstance(refused, sdk_errors.NotFound)
    assert "plugin greeter has no version 9.9.9 installed (have: 1.0.0, 2.0.0)" in str(refused)


@pytest.mark.parametrize(
    ("call", "error", "said"),
    [
        (("nope",), sdk_errors.NotFound, "no plugin named 'nope' is installed"),
        (("",), sdk_errors.InvalidArgument, "name is required"),
        (("x" * 41,), sdk_errors.InvalidArgument, "name has 41 characters"),
        (("broken",), sdk_errors.FailedPrecondition, "plugin broken has no valid manifest"),
    ],
)
def test_enable_refuses_bad_names(
    client: Client, call: tuple[str], error: type[sdk_errors.SdkError], said: str
) -> None:
    refused = fails(client.enable_plugin, *call)
    assert isinstance(refused, error), refused
    assert said in str(refused)


def test_a_broken_manifest_is_listed_with_every_reason(client: Client) -> None:
    broken = plugin(client, "broken")
    assert broken.state == spb.PLUGIN_STATE_UNSPECIFIED
    assert not broken.enabled
    (problem,) = broken.problems
    for field in ("name:", "version:", "entry:", "tools[0].risk:"):
        assert field in problem, problem


@pytest.mark.parametrize(
    ("tool", "arguments", "error", "said"),
    [
        ("clock.nope", {}, sdk_errors.NotFound, "plugin clock has no tool 'clock.nope'"),
        ("clock.now", {"timezone": 5}, sdk_errors.InvalidArgument, "must be a string"),
        ("clock.now", {"zone": "UTC"}, sdk_errors.InvalidArgument, "has no argument 'zone'"),
        ("clock.now", "{", sdk_errors.InvalidArgument, "are not valid JSON"),
        ("clock.now", "[1]", sdk_errors.InvalidArgument, "must be a JSON object, not an array"),
        (
            "clock.now",
            {"timezone": "Mars/Olympus"},
            sdk_errors.FailedPrecondition,
            "unknown time zone 'Mars/Olympus'",
        ),
    ],
)
def test_bad_calls_get_clear_errors(
    client: Client, tool: str, arguments: object, error: type[sdk_errors.SdkError], said: str
) -> None:
    client.enable_plugin("clock", wait=READY_S)
    refused = fails(client.invoke, "clock", tool, arguments)
    assert isinstance(refused, error), refused
    assert said in str(refused)
    # None of it cost the worker anything.
    assert plugin(client, "clock").restarts == 0
