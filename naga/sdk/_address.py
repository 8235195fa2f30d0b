"""Where a core listens and where its owner credential is, from a home or a socket."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from naga.constants import CORE_SOCKET_NAME, OWNER_TOKEN_BYTES, OWNER_TOKEN_NAME, RUN_DIR_NAME
from naga.sdk.errors import CredentialUnreadable

START_HINT = "start it with: naga daemon start"


@dataclass(frozen=True, slots=True)
class CoreAddress:
    """A core's socket and the owner credential file beside it."""

    socket: str
    credential_file: str

    @classmethod
    def of_home(cls, home: str | os.PathLike[str] | None = None) -> CoreAddress:
        """The core of ``home`` (default ``$NAGA_HOME``, else ``~/.naga``)."""
        run = os.path.join(default_home() if home is None else os.fspath(home), RUN_DIR_NAME)
        return cls(os.path.join(run, CORE_SOCKET_NAME), os.path.join(run, OWNER_TOKEN_NAME))

    @classmethod
    def resolve(cls, target: str | os.PathLike[str] | None) -> CoreAddress:
        """A home directory, or a socket path (the credential sits beside it)."""
        if target is None:
            return cls.of_home(None)
        path: str = os.fspath(target)
        if os.path.isdir(path):
            return cls.of_home(path)
        socket = os.path.abspath(path)
        return cls(socket, os.path.join(os.path.dirname(socket), OWNER_TOKEN_NAME))

    @property
    def target(self) -> str:
        """The gRPC target string."""
        return "unix:" + self.socket

    def socket_exists(self) -> bool:
        try:
            return stat.S_ISSOCK(os.stat(self.socket).st_mode)
        except OSError:
            return False


def default_home() -> str:
    raw = os.environ.get("NAGA_HOME") or os.path.join("~", ".naga")
    return os.path.abspath(os.path.expanduser(raw))


def read_credential(path: str) -> bytes:
    """The owner credential the core wrote at its start (raw bytes, 0600)."""
    try:
        with open(path, "rb") as f:
            secret = f.read(OWNER_TOKEN_BYTES + 1)
    except FileNotFoundError:
        raise CredentialUnreadable(
            f"no owner credential at {path}: the core writes it when it starts ({START_HINT})"
        ) from None
    except OSError as exc:
        raise CredentialUnreadable(f"cannot read the owner credential {path}: {exc}") from None
    if len(secret) != OWNER_TOKEN_BYTES:
        raise CredentialUnreadable(
            f"{path} holds {len(secret)} bytes, not a {OWNER_TOKEN_BYTES}-byte owner credential"
        )
    return secret


def owner_credential(home: str | os.PathLike[str] | None = None) -> bytes:
    """The owner credential of the core serving ``home`` (default ``$NAGA_HOME``)."""
    return read_credential(CoreAddress.of_home(home).credential_file)


__all__ = ["START_HINT", "CoreAddress", "default_home", "owner_credential", "read_credential"]
