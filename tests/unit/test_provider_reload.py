"""ProviderFileWatch: providers.json is re-read exactly when a stat of it
or of its directory changed, and each reading replaces the last (valid,
refused or absent)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from naga_core._home import Home
from naga_core._providers import providers_path
from naga_core.agent._provider_reload import ProviderFileWatch


def _body(key: str) -> bytes:
    entry = {"api": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": key, "model": "m"}
    return json.dumps({"providers": {"p": entry}}).encode()


def _replace(path: str, data: bytes) -> None:
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.rename(path + ".new", path)


def _setup(tmp_path: Path) -> tuple[ProviderFileWatch, str]:
    os.chmod(tmp_path, 0o700)
    home = Home(str(tmp_path))
    path = providers_path(home)
    os.makedirs(os.path.dirname(path), mode=0o700)
    _replace(path, _body("sk-one"))
    return ProviderFileWatch(home), path


def _key(watch: ProviderFileWatch) -> str:
    providers = watch.current().providers
    assert providers is not None, watch.current().problem
    return providers.default_provider.api_key


def test_an_unchanged_file_is_read_once(tmp_path: Path) -> None:
    watch, _path = _setup(tmp_path)
    for _ in range(50):
        assert _key(watch) == "sk-one"
    assert watch.reads == 1


def test_every_kind_of_edit_is_seen_at_the_next_check(tmp_path: Path) -> None:
    watch, path = _setup(tmp_path)
    assert _key(watch) == "sk-one"

    _replace(path, _body("sk-two"))  # an editor's rename: a new inode
    assert _key(watch) == "sk-two"

    with open(path, "r+b") as f:  # in place, another size
        f.truncate(0)
        f.write(_body("sk-three-longer"))
    assert _key(watch) == "sk-three-longer"

    os.chmod(path, 0o640)  # ctime only
    assert "has mode 0640, wider than 0600" in watch.current().problem
    assert watch.current().providers is None

    os.chmod(path, 0o600)
    assert _key(watch) == "sk-three-longer"

    credentials = os.path.dirname(path)
    os.chmod(credentials, 0o777)  # the directory, not the file
    assert "its directory" in watch.current().problem
    os.chmod(credentials, 0o700)
    assert _key(watch) == "sk-three-longer"

    os.unlink(path)
    gone = watch.current()
    assert gone.providers is None
    assert gone.problem == ""  # absent, as at start: not a refusal
    assert watch.reads == 8


def test_a_refusal_never_quotes_the_key(tmp_path: Path) -> None:
    watch, path = _setup(tmp_path)
    _replace(path, _body("sk-secret\n"))
    problem = watch.current().problem
    assert "providers.p.api_key: holds whitespace or control characters" in problem
    assert "sk-secret" not in problem
