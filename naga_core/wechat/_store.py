"""The bindings' secrets: ``$NAGA_HOME/credentials/wechat/<bot>.pb``.

One ``naga.v1.WechatCredential`` per bot (directory 0700, file 0600,
written to a temporary name, synced, renamed): the bot token, the base URL,
the scanning user, each user's latest context token. None of it goes in
the ledger or a log: the ledger has the binding's existence and state
(``wechat.binding``), never its token. The plugin gets the token with each
call, over its token-gated socket pair.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re

from google.protobuf.message import DecodeError

from naga.v1 import wechat_pb2 as wpb
from naga_core.errors import NagaError


class WechatError(NagaError):
    """Root of the WeChat channel's errors."""


class CredentialsInvalid(WechatError):
    """A stored credential file cannot be read; the binding is skipped."""


def file_name(bot_id: str) -> str:
    """A file name for ``bot_id`` (T's normalisation, plus a hash so that
    ids differing only in case or punctuation never share a file)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "-", bot_id)[:64]
    return f"{safe}-{hashlib.sha256(bot_id.encode()).hexdigest()[:8]}.pb"


class Credentials:
    def __init__(self, home_root: str) -> None:
        self.directory = os.path.join(home_root, "credentials", "wechat")

    def _path(self, bot_id: str) -> str:
        return os.path.join(self.directory, file_name(bot_id))

    def save(self, cred: wpb.WechatCredential, *, sync: bool = True) -> None:
        """Write ``cred`` whole (a temporary name, then a rename). ``sync``
        False (a context token's update on each message): the rename
        survives the core's crash, only not the machine's power loss, and a
        token lost that way costs one reply (the user's next message brings
        a new one); the bind's save is synced."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        path = self._path(cred.bot_id)
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, cred.SerializeToString())
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def load(self, bot_id: str) -> wpb.WechatCredential | None:
        try:
            with open(self._path(bot_id), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CredentialsInvalid(f"cannot read the credential of {bot_id}: {exc}") from None
        try:
            cred = wpb.WechatCredential.FromString(data)
        except DecodeError:
            raise CredentialsInvalid(f"the credential file of {bot_id} is corrupt") from None
        if cred.bot_id != bot_id or not cred.token:
            raise CredentialsInvalid(f"the credential file of {bot_id} is not its own")
        return cred

    def delete(self, bot_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(bot_id))


__all__ = ["Credentials", "CredentialsInvalid", "WechatError", "file_name"]
