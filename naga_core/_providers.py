"""The model providers file, ``$NAGA_HOME/credentials/providers.json``.

Only the core reads it (it holds API keys, and only the core opens the
home's private files); each provider plugin is later handed its one entry.
Shape::

    {"default": "deepseek",
     "providers": {"deepseek": {"api": "openai",
                                "base_url": "https://api.deepseek.com/v1",
                                "api_key": "sk-...",
                                "model": "deepseek-chat"}}}

The file is refused, with a message saying why and how to fix it, if it is
a symlink, not a regular file, owned by another user, readable or writable
by anyone but its owner (mode wider than 0600), in a directory others can
write, not UTF-8, not JSON (line and column), or not this shape. No message
ever holds an API key. A missing file is :class:`NoProviderConfigured`: the
daemon then starts the embedded local model.
"""

from __future__ import annotations

import json
import os
import re
import stat
import types
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

import pydantic

from naga_core._home import Home
from naga_core.errors import ConfigError

#: Largest providers file read; a bigger one is not a hand-written config.
PROVIDERS_FILE_MAX_BYTES = 1 << 20

_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_CONTROL = re.compile(r"[\x00-\x20\x7f]")


class ProvidersFileError(ConfigError):
    """providers.json is refused; ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class NoProviderConfigured(ProvidersFileError):
    """There is no providers.json: no model provider is configured."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "no provider configured (the file does not exist)")


#: The context window (tokens) of a provider whose entry declares none: what
#: current hosted models all offer at least.
DEFAULT_CONTEXT_WINDOW = 32_768
MIN_CONTEXT_WINDOW = 1_024
MAX_CONTEXT_WINDOW = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Provider:
    """One configured provider; ``repr`` never shows the key."""

    name: str
    api: Literal["openai", "anthropic"]
    base_url: str
    api_key: str = field(repr=False)
    model: str
    #: The model's context window in tokens, as the entry declares it
    #: (``context_window``); the prompt budget is cut from it.
    context_window: int = DEFAULT_CONTEXT_WINDOW
    #: The model sees images (``vision``): user images are sent to it as
    #: image parts; otherwise it gets a text placeholder (adr 0047).
    vision: bool = False


@dataclass(frozen=True, slots=True)
class Providers:
    """The validated file. Build it with :meth:`load` (or :meth:`parse`)."""

    default: str
    by_name: Mapping[str, Provider]

    @property
    def default_provider(self) -> Provider:
        return self.by_name[self.default]

    @classmethod
    def load(cls, home: Home) -> Providers:
        path = providers_path(home)
        return cls.parse(_read_private(path), path)

    @classmethod
    def parse(cls, data: bytes, path: str) -> Providers:
        """Validate the file's bytes (no file checks); ``path`` names it in errors."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProvidersFileError(path, f"is not UTF-8 text (byte {exc.start})") from None
        try:
            raw = json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as exc:
            raise ProvidersFileError(
                path, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
        except _DuplicateKey as exc:
            raise ProvidersFileError(path, f"the key {exc.key!r} appears twice") from None
        try:
            parsed = _File.model_validate(raw)
        except pydantic.ValidationError as exc:
            raise ProvidersFileError(path, _describe(exc)) from None
        names = sorted(parsed.providers)
        if not names:
            raise ProvidersFileError(
                path,
                "providers is empty; add one, or remove the file to use the embedded local model",
            )
        default = parsed.default
        if default is None:
            if len(names) > 1:
                raise ProvidersFileError(
                    path, f"default is missing; name one of the providers: {', '.join(names)}"
                )
            default = names[0]
        elif default not in parsed.providers:
            raise ProvidersFileError(
                path,
                f"default names {default!r}, which is not in providers ({', '.join(names)})",
            )
        by_name = {
            name: Provider(
                name=name,
                api=entry.api,
                base_url=entry.base_url,
                api_key=entry.api_key,
                model=entry.model,
                context_window=entry.context_window,
                vision=entry.vision,
            )
            for name, entry in sorted(parsed.providers.items())
        }
        return cls(default, types.MappingProxyType(by_name))


def providers_path(home: Home) -> str:
    return os.path.join(home.root, "credentials", "providers.json")


# --- the file on disk ---------------------------------------------------------------


def _read_private(path: str) -> bytes:
    directory = os.path.dirname(path)
    try:
        dir_stat = os.stat(directory)
        link_stat = os.lstat(path)
    except FileNotFoundError:
        raise NoProviderConfigured(path) from None
    except OSError as exc:
        raise ProvidersFileError(path, f"cannot be read: {exc.strerror}") from None
    if stat.S_IMODE(dir_stat.st_mode) & 0o022 or dir_stat.st_uid != os.geteuid():
        # Whoever can write the directory can swap the file for their own.
        raise ProvidersFileError(
            path,
            f"its directory {directory} is writable by others or not yours; "
            f"it must be private (chmod 700 {directory})",
        )
    if stat.S_ISLNK(link_stat.st_mode):
        raise ProvidersFileError(
            path, "is a symbolic link; it must be the file itself, not a link to it"
        )
    try:
        # O_NOFOLLOW: a link swapped in after the lstat is still refused;
        # O_NONBLOCK: a FIFO put there cannot hang the core.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise ProvidersFileError(path, f"cannot be opened: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        _check_private(path, st)
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > PROVIDERS_FILE_MAX_BYTES:
                raise ProvidersFileError(
                    path, f"is larger than {PROVIDERS_FILE_MAX_BYTES} bytes; it is not a config"
                )
        return b"".join(chunks)
    finally:
        os.close(fd)


def _check_private(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ProvidersFileError(path, "is not a regular file")
    if st.st_uid != os.geteuid():
        raise ProvidersFileError(
            path,
            f"is owned by uid {st.st_uid}, not by the user running Naga (uid {os.geteuid()})",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & ~0o600:
        raise ProvidersFileError(
            path,
            f"has mode {mode:04o}, wider than 0600; it holds API keys, so only its owner "
            f"may read it (chmod 600 {path})",
        )


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # A provider named twice would silently keep the last; refuse instead.
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


# --- the shape ------------------------------------------------------------------------


class _Entry(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)

    api: Literal["openai", "anthropic"]
    base_url: str
    # Local servers (llama.cpp, Ollama) take none.
    api_key: str = ""
    model: str = pydantic.Field(min_length=1, max_length=256)
    context_window: int = pydantic.Field(
        default=DEFAULT_CONTEXT_WINDOW, ge=MIN_CONTEXT_WINDOW, le=MAX_CONTEXT_WINDOW
    )
    vision: bool = False

    @pydantic.field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        try:
            parts = urllib.parse.urlsplit(value)
            parts.port  # noqa: B018  (raises on a malformed port)
        except ValueError as exc:
            raise ValueError(f"not a URL ({exc})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not hold a user or password (the key goes in api_key)")
        if parts.query or parts.fragment:
            raise ValueError("must not hold a query or fragment")
        return value.rstrip("/")

    @pydantic.field_validator("api_key")
    @classmethod
    def _api_key(cls, value: str) -> str:
        if _CONTROL.search(value):
            raise ValueError("holds whitespace or control characters (a pasted newline?)")
        return value

    @pydantic.field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if _CONTROL.search(value):
            raise ValueError("holds whitespace or control characters")
        return value


ProviderName = Annotated[str, pydantic.StringConstraints(pattern=_NAME_PATTERN)]


class _File(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)

    default: str | None = None
    providers: dict[ProviderName, _Entry]


def _describe(error: pydantic.ValidationError) -> str:
    """``path: message`` per failure; never the input (it may be a key)."""
    problems: list[str] = []
    for item in error.errors(include_url=False, include_input=False, include_context=False):
        loc = [str(part) for part in item["loc"] if part != "[key]"]
        where = ".".join(loc) or "the file"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "string_pattern_mismatch" and loc[:1] == ["providers"]:
            message = "a provider name must be 1-64 letters, digits, '_', '.' or '-'"
        elif item["type"] in ("dict_type", "model_type"):
            message = "must be a JSON object"
        problems.append(f"{where}: {message}")
    return "; ".join(problems)


__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "MAX_CONTEXT_WINDOW",
    "MIN_CONTEXT_WINDOW",
    "PROVIDERS_FILE_MAX_BYTES",
    "NoProviderConfigured",
    "Provider",
    "Providers",
    "ProvidersFileError",
    "providers_path",
]
