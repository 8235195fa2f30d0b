"""$NAGA_HOME/credentials/providers.json: what is accepted, and every
refusal with its message. No message may hold an API key."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from naga_core._home import Home
from naga_core._providers import (
    PROVIDERS_FILE_MAX_BYTES,
    NoProviderConfigured,
    Provider,
    Providers,
    ProvidersFileError,
    providers_path,
)
from naga_core.errors import ConfigError

KEY = "sk-providers-test-9d1e2f"

DEEPSEEK: dict[str, Any] = {
    "api": "openai",
    "base_url": "https://api.deepseek.com/v1/",
    "api_key": KEY,
    "model": "deepseek-chat",
}
CLAUDE: dict[str, Any] = {
    "api": "anthropic",
    "base_url": "https://api.anthropic.com",
    "api_key": KEY + "-b",
    "model": "claude-sonnet-4-5",
}
OLLAMA: dict[str, Any] = {
    "api": "openai",
    "base_url": "http://127.0.0.1:11434/v1",
    "model": "qwen3:4b",
}


def _home(tmp_path: Path) -> Home:
    os.chmod(tmp_path, 0o700)
    return Home(str(tmp_path))


def _write(home: Home, content: bytes | str | dict[str, Any], mode: int = 0o600) -> str:
    path = providers_path(home)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    if isinstance(content, dict):
        content = json.dumps(content, indent=2)
    data = content.encode() if isinstance(content, str) else content
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def _refusal(home: Home) -> str:
    with pytest.raises(ProvidersFileError) as caught:
        Providers.load(home)
    message = str(caught.value)
    assert isinstance(caught.value, ConfigError)
    assert KEY not in message
    assert message.startswith(providers_path(home) + ": ")
    return message


def test_a_valid_file(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _write(
        home,
        {
            "default": "claude",
            "providers": {"deepseek": DEEPSEEK, "claude": CLAUDE, "local": OLLAMA},
        },
    )
    providers = Providers.load(home)
    assert providers.default == "claude"
    assert providers.default_provider == Provider(
        name="claude",
        api="anthropic",
        base_url="https://api.anthropic.com",
        api_key=KEY + "-b",
        model="claude-sonnet-4-5",
    )
    assert sorted(providers.by_name) == ["claude", "deepseek", "local"]
    assert providers.by_name["deepseek"].base_url == "https://api.deepseek.com/v1"
    assert providers.by_name["local"].api_key == ""
    assert KEY not in repr(providers)
    with pytest.raises(TypeError):
        providers.by_name["x"] = providers.default_provider  # type: ignore[index]


def test_one_provider_needs_no_default(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _write(home, {"providers": {"local": OLLAMA}})
    assert Providers.load(home).default_provider.name == "local"


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_owner_only_modes_are_accepted(tmp_path: Path, mode: int) -> None:
    home = _home(tmp_path)
    _write(home, {"providers": {"local": OLLAMA}}, mode=mode)
    assert Providers.load(home).default == "local"


def test_a_missing_file_means_no_provider(tmp_path: Path) -> None:
    home = _home(tmp_path)
    for _ in range(2):  # without credentials/, then with it but no file
        with pytest.raises(NoProviderConfigured) as caught:
            Providers.load(home)
        assert "no provider configured" in str(caught.value)
        os.makedirs(os.path.dirname(providers_path(home)), mode=0o700, exist_ok=True)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o700, 0o610, 0o4600])
def test_a_mode_wider_than_0600_is_refused(tmp_path: Path, mode: int) -> None:
    home = _home(tmp_path)
    path = _write(home, {"providers": {"deepseek": DEEPSEEK}}, mode=mode)
    message = _refusal(home)
    assert f"has mode {mode:04o}, wider than 0600" in message
    assert f"chmod 600 {path}" in message


def test_a_symlink_is_refused_even_to_a_private_file(tmp_path: Path) -> None:
    home = _home(tmp_path)
    path = _write(home, {"providers": {"deepseek": DEEPSEEK}})
    real = tmp_path / "elsewhere.json"
    os.rename(path, real)
    os.symlink(real, path)
    assert "is a symbolic link" in _refusal(home)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_a_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    home = _home(tmp_path)
    path = _write(home, {"providers": {"deepseek": DEEPSEEK}})
    os.chown(path, 54321, -1)
    assert "is owned by uid 54321, not by the user running Naga" in _refusal(home)


def test_a_credentials_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    home = _home(tmp_path)
    path = _write(home, {"providers": {"deepseek": DEEPSEEK}})
    os.chmod(os.path.dirname(path), 0o777)
    assert "is writable by others or not yours" in _refusal(home)


def test_a_directory_or_fifo_is_not_a_regular_file(tmp_path: Path) -> None:
    home = _home(tmp_path)
    path = providers_path(home)
    os.makedirs(path, mode=0o700)
    assert "is not a regular file" in _refusal(home)
    os.rmdir(path)
    os.mkfifo(path, 0o600)  # opened non-blocking: no writer, no hang
    assert "is not a regular file" in _refusal(home)


def test_a_huge_file_is_refused(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _write(home, b" " * (PROVIDERS_FILE_MAX_BYTES + 1))
    assert f"is larger than {PROVIDERS_FILE_MAX_BYTES} bytes" in _refusal(home)


def _providers(**entry: Any) -> dict[str, Any]:
    return {"providers": {"deepseek": {**DEEPSEEK, **entry}}}


CONTENT_REFUSALS: dict[str, tuple[bytes | str | dict[str, Any], str]] = {
    "not utf-8": (b'{"providers": "\xff"}', "is not UTF-8 text (byte 15)"),
    "invalid json": (
        '{\n  "providers": {\n    "a": {"api": "openai",}\n  }\n}',
        "invalid JSON at line 3, column 27: Expecting property name",
    ),
    "empty": ("", "invalid JSON at line 1, column 1: Expecting value"),
    "not an object": ("[]", "the file: must be a JSON object"),
    "duplicate provider": (
        '{"providers": {"a": {}, "a": {}}}',
        "the key 'a' appears twice",
    ),
    "no providers key": ({"default": "a"}, "providers: Field required"),
    "empty providers": ({"providers": {}}, "providers is empty"),
    "default missing among two": (
        {"providers": {"a": OLLAMA, "b": OLLAMA}},
        "default is missing; name one of the providers: a, b",
    ),
    "default not a provider": (
        {"default": "openai", "providers": {"deepseek": DEEPSEEK}},
        "default names 'openai', which is not in providers (deepseek)",
    ),
    "unknown api": (_providers(api="gemini"), "providers.deepseek.api: Input should be 'openai'"),
    "ftp url": (
        _providers(base_url="ftp://api.deepseek.com"),
        "providers.deepseek.base_url: must be an http:// or https:// URL with a host",
    ),
    "url without scheme": (
        _providers(base_url="api.deepseek.com/v1"),
        "providers.deepseek.base_url: must be an http:// or https:// URL",
    ),
    "url with password": (
        _providers(base_url=f"https://me:{KEY}@api.deepseek.com"),
        "providers.deepseek.base_url: must not hold a user or password",
    ),
    "url with query": (
        _providers(base_url="https://api.deepseek.com/v1?key=1"),
        "must not hold a query or fragment",
    ),
    "url with a bad port": (_providers(base_url="http://localhost:0x50/v1"), "not a URL"),
    "key with a newline": (
        _providers(api_key=KEY + "\n"),
        "providers.deepseek.api_key: holds whitespace or control characters",
    ),
    "key not a string": (_providers(api_key=12345), "providers.deepseek.api_key: Input should be"),
    "empty model": (_providers(model=""), "providers.deepseek.model: String should have at least"),
    "model with a space": (_providers(model="deep seek"), "providers.deepseek.model: holds"),
    "misspelt field": (
        {"providers": {"deepseek": {**DEEPSEEK, "apikey": KEY}}},
        "providers.deepseek.apikey: Extra inputs are not permitted",
    ),
    "unknown top-level field": (
        {"providers": {"deepseek": DEEPSEEK}, "defualt": "deepseek"},
        "defualt: Extra inputs are not permitted",
    ),
    "bad provider name": (
        {"providers": {"deep seek": DEEPSEEK}},
        "providers.deep seek: a provider name must be 1-64 letters",
    ),
    "missing fields": (
        {"providers": {"deepseek": {"api": "openai"}}},
        "providers.deepseek.base_url: Field required; providers.deepseek.model: Field required",
    ),
}


@pytest.mark.parametrize(
    ("content", "words"), CONTENT_REFUSALS.values(), ids=CONTENT_REFUSALS.keys()
)
def test_bad_content_is_refused_with_a_specific_message(
    tmp_path: Path, content: bytes | str | dict[str, Any], words: str
) -> None:
    home = _home(tmp_path)
    _write(home, content)
    assert words in _refusal(home)
