"""providers.json edited while a real core runs: the next turn uses what the
file says now. Two fake model servers; the file is edited between turns the
way owners do (an editor's rename into place, an in-place rewrite, chmod,
rm), and each edit is seen at the next model call with no restart."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile

import pytest

from naga.v1 import turn_pb2 as tpb
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import AGENT, TUNING, ServerThread, error, final, turn
from tests.agent.test_provider_setting import two_servers
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply

__all__ = ["two_servers"]  # the fixture, used by name below

NEW_KEY = "sk-rotated-0123456789"


def _body(base_url: str, api_key: str) -> bytes:
    entry = {"api": "openai", "base_url": base_url, "api_key": api_key, "model": "fake-model"}
    return json.dumps({"default": "main", "providers": {"main": entry}}).encode()


def _replace(path: str, data: bytes) -> None:
    """As editors save: a new file renamed over the old one."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.rename(tmp, path)


def _rewrite(path: str, data: bytes) -> None:
    """In place: same inode, new bytes."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data)


def test_edits_of_providers_json_reach_the_next_turn_without_a_restart(
    two_servers: tuple[ServerThread, ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    one, two = two_servers
    root = tempfile.mkdtemp(prefix="naga-r-")
    home = root + "/home"
    creds = os.path.join(home, "credentials")
    os.makedirs(home, mode=0o700)
    os.makedirs(creds, mode=0o700)
    path = os.path.join(creds, "providers.json")
    _replace(path, _body(one.server.openai_url, "sk-test"))
    configs = os.path.join(home, "work", "provider-config")
    # No embedded model: a deleted file must then be a clear error, not a 700 MB start.
    agent = dataclasses.replace(AGENT, local_model=False)
    try:
        with core_in_thread(home, plugins=PluginsConfig(tuning=TUNING), agent=agent) as core:
            with core.client() as c:
                one.script(Reply.answer("from one"))
                assert final(turn(c, "s", "hi")).text == "from one"

                # Same provider name, another base_url: a new worker, new egress.
                _replace(path, _body(two.server.openai_url, "sk-test"))
                two.script(Reply.answer("from two"))
                assert final(turn(c, "s", "who now?")).text == "from two"
                assert one.server.pending == 0
                assert two.server.pending == 0
                # The replaced worker is gone, and so is its copy of the key.
                assert len(os.listdir(configs)) == 1

                # Only the key changes (in place): the next request carries it.
                _rewrite(path, _body(two.server.openai_url, NEW_KEY))
                two.script(Reply.answer("rotated"))
                assert final(turn(c, "s", "new key?")).text == "rotated"
                assert two.server.requests[-1].header("authorization") == f"Bearer {NEW_KEY}"

                # Refused (mode 0644): a MODEL error quoting the refusal, and
                # no request leaves with the last good key.
                sent = len(one.server.requests) + len(two.server.requests)
                os.chmod(path, 0o644)
                err = error(turn(c, "s", "still there?"))
                assert err.kind == tpb.TURN_ERROR_KIND_MODEL
                assert f"{path}: has mode 0644, wider than 0600" in err.message
                assert len(one.server.requests) + len(two.server.requests) == sent
                assert not [p for p in c.status().processes if p.role.startswith("provider:")]

                os.chmod(path, 0o600)
                two.script(Reply.answer("fixed"))
                assert final(turn(c, "s", "and now?")).text == "fixed"
                assert two.server.requests[-1].header("authorization") == f"Bearer {NEW_KEY}"

                # Not JSON: the line and column, not the stale provider.
                _rewrite(path, b'{"default": "main",\n  "providers": ')
                err = error(turn(c, "s", "typo?"))
                assert err.kind == tpb.TURN_ERROR_KIND_MODEL
                assert "invalid JSON at line 2, column" in err.message

                # Deleted: as at start with no file (here: no embedded model).
                os.unlink(path)
                err = error(turn(c, "s", "gone?"))
                assert err.kind == tpb.TURN_ERROR_KIND_MODEL
                assert "no model provider is configured" in err.message
                assert len(one.server.requests) + len(two.server.requests) == sent + 1

                _replace(path, _body(one.server.openai_url, NEW_KEY))
                one.script(Reply.answer("back"))
                assert final(turn(c, "s", "back?")).text == "back"
                assert not one.server.unexpected
                assert not two.server.unexpected
                c.shutdown("test done")
            assert not core.join().failed
        assert NEW_KEY not in caplog.text
        assert "sk-test" not in caplog.text
    finally:
        shutil.rmtree(root, ignore_errors=True)
