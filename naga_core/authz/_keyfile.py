"""The token root key: ``$NAGA_HOME/keys/token.key``, 32 random bytes, 0600.

Anyone who reads it can mint any token, so a file others could read is
refused rather than used (as ``load_signer`` refuses a loose ledger key),
and so is a symlink, a file of another owner, or one of the wrong size.
Creation never overwrites: the key is written under a temporary name and
hard-linked into place, so a second creator finds the first one's key.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

from naga.constants import TOKEN_KEY_BYTES
from naga_core._home import Home
from naga_core.authz._errors import TokenKeyError
from naga_core.authz._token import RootKey


def token_key_path(home: Home) -> str:
    return os.path.join(home.keys_dir, "token.key")


def load_token_key(home: Home, *, create: bool) -> RootKey:
    """The instance's token root key; created on first use when asked."""
    path = token_key_path(home)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            raise TokenKeyError(f"no token root key at {path}") from None
        return _create(home, path)
    except OSError as exc:  # ELOOP: a symlink
        raise TokenKeyError(f"cannot open the token root key {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokenKeyError(f"{path} is not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise TokenKeyError(f"{path} has mode {mode:04o}; it must be 0600 (chmod 600 {path})")
        if st.st_uid != os.geteuid():
            raise TokenKeyError(f"{path} belongs to uid {st.st_uid}, not to this user")
        if st.st_size != TOKEN_KEY_BYTES:
            raise TokenKeyError(
                f"{path} holds {st.st_size} bytes; a token root key is exactly {TOKEN_KEY_BYTES}"
            )
        data = os.read(fd, TOKEN_KEY_BYTES + 1)
    except OSError as exc:
        raise TokenKeyError(f"cannot read the token root key {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) != TOKEN_KEY_BYTES:
        raise TokenKeyError(f"{path} changed size while being read")
    return RootKey(data)


def _create(home: Home, path: str) -> RootKey:
    key = RootKey.generate()
    os.makedirs(home.keys_dir, mode=0o700, exist_ok=True)
    tmp = f"{path}.{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, key.secret)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:  # created meanwhile by someone else: theirs is the key
            return load_token_key(home, create=False)
        dfd = os.open(home.keys_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise TokenKeyError(f"cannot create the token root key {path}: {exc.strerror}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return key


__all__ = ["load_token_key", "token_key_path"]
