"""Where the keys live: the master in ``keys/memory.key`` and each subject's
wrapped key in ``keys/memory/<digest of the subject>.kek``, never in the
ledger.

Why files and not ledger records: the ledger is append-only and its hash
chain covers every byte it ever held, so a key written there could never be
destroyed without breaking the chain. A subject's key file is removed by
``forget`` (unlink, then the directory fsynced, so the removal survives a
power cut); the ledger keeps only ciphertext and a ``memory.forget`` record,
and still verifies. A key file is never overwritten: a new key is written
under a temporary name and hard-linked into place, like the token key.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat

from naga_core._home import Home
from naga_core.memory._crypto import KEY_BYTES, new_key, unwrap_kek, wrap_kek
from naga_core.memory._errors import MemoryKeyError

_KEK_MAGIC = b"naga-memory-kek v1\n"
_KEK_ID_BYTES = 16  # hex characters


def master_key_path(home: Home) -> str:
    return os.path.join(home.keys_dir, "memory.key")


def subject_keys_dir(home: Home) -> str:
    return os.path.join(home.keys_dir, "memory")


def subject_key_path(home: Home, subject: str) -> str:
    digest = hashlib.sha256(b"naga-memory-subject\0" + subject.encode()).hexdigest()[:40]
    return os.path.join(subject_keys_dir(home), digest + ".kek")


def _read_private(path: str, what: str, max_bytes: int) -> bytes | None:
    """The file's bytes; None if it does not exist. Refused: a symlink, not
    a regular file, readable by others, of another owner."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MemoryKeyError(f"cannot open {what} {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise MemoryKeyError(f"{path} is not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise MemoryKeyError(f"{path} has mode {mode:04o}; it must be 0600 (chmod 600 {path})")
        if st.st_uid != os.geteuid():
            raise MemoryKeyError(f"{path} belongs to uid {st.st_uid}, not to this user")
        data = os.read(fd, max_bytes + 1)
    except OSError as exc:
        raise MemoryKeyError(f"cannot read {what} {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise MemoryKeyError(f"{path} is larger than {what} can be")
    return data


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_exclusive(directory: str, path: str, data: bytes) -> bool:
    """Write ``data`` at ``path`` (0600) unless it exists; whether it was ours."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = f"{path}.{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        else:
            _sync_dir(directory)
            return True
    except OSError as exc:
        raise MemoryKeyError(f"cannot write the key {path}: {exc.strerror}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def load_master(home: Home, *, create: bool) -> bytes:
    """The instance's memory master key; created on first use when asked."""
    path = master_key_path(home)
    data = _read_private(path, "the memory master key", KEY_BYTES)
    if data is None:
        if not create:
            raise MemoryKeyError(f"no memory master key at {path}")
        key = new_key()
        if not _create_exclusive(home.keys_dir, path, key):
            return load_master(home, create=False)
        return key
    if len(data) != KEY_BYTES:
        raise MemoryKeyError(f"{path} holds {len(data)} bytes; the master key is {KEY_BYTES}")
    return data


class KeyRing:
    """The master key and the subject keys unwrapped so far (in the core's
    memory only). Every method runs on the core's loop thread."""

    def __init__(self, home: Home, master: bytes) -> None:
        self._home = home
        self._master = master
        self._open: dict[str, tuple[str, bytes]] = {}
        #: Moves with every destroy: a reader caching what it opened (the
        #: skill library) drops its cache when it moves.
        self.generation = 0

    @classmethod
    def of_home(cls, home: Home) -> KeyRing:
        return cls(home, load_master(home, create=True))

    def current(self, subject: str) -> tuple[str, bytes] | None:
        """The subject's (key id, key), or None if it has none (never had
        one, or it was forgotten)."""
        got = self._open.get(subject)
        if got is not None:
            return got
        path = subject_key_path(self._home, subject)
        data = _read_private(path, "a subject key", 4096)
        if data is None:
            return None
        if not data.startswith(_KEK_MAGIC) or len(data) < len(_KEK_MAGIC) + _KEK_ID_BYTES:
            raise MemoryKeyError(f"{path} is not a Naga subject key file")
        body = data[len(_KEK_MAGIC) :]
        kek_id = body[:_KEK_ID_BYTES].decode("ascii", errors="replace")
        kek = unwrap_kek(self._master, body[_KEK_ID_BYTES:], subject, kek_id)
        self._open[subject] = (kek_id, kek)
        return kek_id, kek

    def ensure(self, subject: str) -> tuple[str, bytes]:
        """The subject's key, made (and durable) on its first use."""
        got = self.current(subject)
        if got is not None:
            return got
        kek_id, kek = secrets.token_hex(_KEK_ID_BYTES // 2), new_key()
        box = wrap_kek(self._master, kek, subject, kek_id)
        path = subject_key_path(self._home, subject)
        if not _create_exclusive(
            subject_keys_dir(self._home), path, _KEK_MAGIC + kek_id.encode() + box
        ):
            got = self.current(subject)
            assert got is not None
            return got
        self._open[subject] = (kek_id, kek)
        return kek_id, kek

    def destroy(self, subject: str) -> str | None:
        """Remove the subject's key for good; the id of the key destroyed
        (None if there was none). Durable when this returns."""
        try:
            got = self.current(subject)
        except MemoryKeyError:
            got = None  # a broken key file is destroyed all the same
        self._open.pop(subject, None)
        self.generation += 1
        path = subject_key_path(self._home, subject)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return got[0] if got else None
        except OSError as exc:
            raise MemoryKeyError(f"cannot remove the key {path}: {exc.strerror}") from None
        _sync_dir(subject_keys_dir(self._home))
        return got[0] if got else ""


__all__ = ["KeyRing", "load_master", "master_key_path", "subject_key_path", "subject_keys_dir"]
