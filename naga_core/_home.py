"""Where a Naga instance keeps its state, and its signing key.

``$NAGA_HOME`` (default ``~/.naga``) is private: directories 0700, files
0600. Only the core process opens what is under it.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass

from naga.constants import CHECKPOINT_ORIGIN_PREFIX
from naga_core.errors import ConfigError
from naga_core.ledger import CheckpointSigner

_KEY_HEADER = "naga-ledger-key v1"


@dataclass(frozen=True, slots=True)
class Home:
    """Paths of one instance's home directory."""

    root: str

    @classmethod
    def resolve(cls, override: str | None = None) -> Home:
        """``override``, else ``$NAGA_HOME``, else ``~/.naga``; made absolute."""
        raw = override or os.environ.get("NAGA_HOME") or os.path.join("~", ".naga")
        return cls(os.path.abspath(os.path.expanduser(raw)))

    @property
    def ledger_dir(self) -> str:
        return os.path.join(self.root, "ledger")

    @property
    def blobs_dir(self) -> str:
        return os.path.join(self.root, "blobs")

    @property
    def keys_dir(self) -> str:
        return os.path.join(self.root, "keys")

    @property
    def signing_key_path(self) -> str:
        return os.path.join(self.keys_dir, "ledger.key")

    @property
    def public_key_path(self) -> str:
        return os.path.join(self.keys_dir, "ledger.pub")

    def exists(self) -> bool:
        return os.path.isdir(self.ledger_dir)

    def ensure(self) -> None:
        """Create the home (0700) if missing; refuse one that others can read."""
        created = not os.path.isdir(self.root)
        for d in (self.root, self.keys_dir):
            os.makedirs(d, mode=0o700, exist_ok=True)
        if created:  # the home's own entry must survive a power cut too
            fd = os.open(os.path.dirname(self.root) or ".", os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        mode = stat.S_IMODE(os.stat(self.root).st_mode)
        if mode & 0o077:
            raise ConfigError(
                f"{self.root} has mode {mode:04o}; Naga's home must not be readable by others "
                f"(chmod 700 {self.root})"
            )


def load_signer(home: Home, *, create: bool) -> CheckpointSigner:
    """The instance's Ed25519 checkpoint key; created on first use when asked.

    A key file readable by others is refused rather than used: a leaked key
    lets anyone forge checkpoints.
    """
    path = home.signing_key_path
    if not os.path.exists(path):
        if not create:
            raise ConfigError(f"no ledger signing key at {path}")
        return _create_key(home)
    st = os.stat(path)
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise ConfigError(
            f"{path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0600 (chmod 600 {path})"
        )
    with open(path, encoding="ascii", errors="replace") as f:
        lines = f.read().splitlines()
    if len(lines) != 3 or lines[0] != _KEY_HEADER:
        raise ConfigError(f"{path} is not a Naga ledger key file")
    try:
        seed = bytes.fromhex(lines[2])
        return CheckpointSigner.from_private_bytes(lines[1], seed)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _create_key(home: Home) -> CheckpointSigner:
    name = f"{CHECKPOINT_ORIGIN_PREFIX}/{secrets.token_hex(8)}"
    signer = CheckpointSigner.generate(name)
    os.makedirs(home.keys_dir, mode=0o700, exist_ok=True)
    tmp = home.signing_key_path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{_KEY_HEADER}\n{name}\n{signer.private_bytes.hex()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, home.signing_key_path)
    with open(home.public_key_path, "w", encoding="ascii") as f:
        f.write(signer.verifier().vkey() + "\n")
    os.chmod(home.public_key_path, 0o644)
    dfd = os.open(home.keys_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return signer
