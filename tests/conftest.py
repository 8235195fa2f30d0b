"""The test tiers (Makefile: ``make test-fast``, ``make test``).

``make test`` runs everything at each test's own number of examples.
``make test-fast`` (the edit loop) passes ``--fast``: the slow tests are
skipped, and every hypothesis test runs at most :data:`FAST_EXAMPLES`
examples (stateful ones :data:`FAST_STEPS` steps), its own ``@settings``
included, through the ``fast`` hypothesis profile and a cap on explicit
settings. What the cap cannot reach it refuses to run silently: the run
stops with a usage error naming the test.

Both tiers run test files in parallel (``-n auto --dist loadfile``): a file
runs whole on one worker, its module fixtures shared, its tests in order.
Files that share something beyond their own temporary directories are
grouped (:data:`SHARED`): a group runs on one worker, one file after
another.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings
from xdist.scheduler import LoadFileScheduling  # pyright: ignore[reportMissingTypeStubs]

import sandbox

#: Examples per hypothesis test in the fast tier.
FAST_EXAMPLES = 10
#: Steps per stateful example in the fast tier.
FAST_STEPS = 10

# No per-example deadline (hypothesis's default is 200 ms): it is a wall-time
# assertion, and on a loaded two-core box a sealing property's example took
# 322 ms and failed the run. A test that must be quick says so in a bench.
settings.register_profile("naga", deadline=None)
settings.register_profile(
    "fast",
    parent=settings.get_profile("naga"),
    max_examples=FAST_EXAMPLES,
    stateful_step_count=FAST_STEPS,
)
settings.load_profile("naga")

_SETTINGS_ATTRIBUTE = "_hypothesis_internal_use_settings"

#: Test files grouped by what they share, each group kept on one worker.
SHARED: dict[str, tuple[str, ...]] = {
    # A TCP port chosen by binding port 0 and closing it, then handed to a
    # gateway in another process (which cannot bind port 0 and report back
    # yet): kept apart from each other so that two of them never pick and
    # release the same port in the same moment.
    "tcp-ports": (
        "tests/cli/test_cli_fuzz.py",
        "tests/cli/test_cli_messages.py",
        "tests/cli/test_console_cli.py",
        "tests/cli/test_doctor.py",
        "tests/crash/test_gateway_kill.py",
        "tests/gateway/test_browser.py",
        "tests/gateway/test_console_chat.py",
        "tests/gateway/test_console_connection.py",
        "tests/gateway/test_console_frame.py",
        "tests/gateway/test_owner_proof.py",
        "tests/gateway/test_port_setting.py",
        "tests/gateway/test_real_core.py",
        "tests/gateway/test_restart.py",
        "tests/gateway/test_revival.py",
        "tests/sandbox/test_launcher.py",
        "tests/sandbox/test_model_server.py",
        "tests/tools/test_console.py",
    ),
    # The real local model: 470 MiB and both cores each; two at once only
    # starve each other into their timeouts.
    "local-model": (
        "tests/localmodel/test_job_compile_local.py",
        "tests/localmodel/test_local_model.py",
        "tests/localmodel/test_switch_to_local.py",
        "tests/localmodel/test_turn_on_local_model.py",
    ),
}
_GROUP_OF = {path: group for group, paths in SHARED.items() for path in paths}


class _FileOrGroup(LoadFileScheduling):
    """xdist's loadfile, with the :data:`SHARED` files one unit per group."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return _GROUP_OF.get(path, path)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    if config.getoption("dist") != "loadfile":
        return None
    return _FileOrGroup(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        default=False,
        help="the fast tier: skip tests marked slow, run hypothesis tests with few examples",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fast"):
        settings.load_profile("fast")


def _capped(current: settings) -> settings:
    return settings(
        current,
        max_examples=min(current.max_examples, FAST_EXAMPLES),
        stateful_step_count=min(current.stateful_step_count, FAST_STEPS),
    )


def _cap(item: pytest.Item) -> None:
    """Lower an explicit ``@settings`` (or a state machine's ``settings``)
    to the fast tier's."""
    if not isinstance(item, pytest.Function):
        return
    cls: Any = item.cls
    machine_settings = getattr(cls, "settings", None)
    if cls is not None and isinstance(machine_settings, settings):
        cls.settings = _capped(machine_settings)
        return
    fn: Any = getattr(item.obj, "__func__", item.obj)
    if not getattr(fn, "is_hypothesis_test", False):
        return
    current = getattr(fn, _SETTINGS_ATTRIBUTE, None)
    if not isinstance(current, settings):
        raise pytest.UsageError(
            f"{item.nodeid}: cannot find its hypothesis settings to cap them for --fast "
            f"(hypothesis no longer keeps them in {_SETTINGS_ATTRIBUTE})"
        )
    setattr(fn, _SETTINGS_ATTRIBUTE, _capped(current))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--fast"):
        return
    skip = pytest.mark.skip(reason="slow: make test runs it (make test-fast skips it)")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
        else:
            _cap(item)


@pytest.fixture
def forker() -> Iterator[sandbox.Forker]:
    """The test's own fork thread for the children it launches, as a
    composition root owns one (ADR 0062); closed after the test, so a child
    the test left running dies with it."""
    with sandbox.Forker() as owned:
        yield owned
