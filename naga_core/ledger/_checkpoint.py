"""Signed checkpoints: C2SP tlog-checkpoint bodies in C2SP signed notes.

A checkpoint commits to a log's origin, size and RFC 9162 root. It is
published as a signed note, the format Go's sumdb, Sigstore, Trillian
witnesses and Tessera share, so any of their tools can check Naga's::

    naga.local/ledger
    1024
    <base64 root>

    — naga.local/ledger <base64(key id || Ed25519 signature)>

Specs: https://c2sp.org/signed-note and https://c2sp.org/tlog-checkpoint;
reference implementation golang.org/x/mod/sumdb/note.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from naga_core.errors import ProofError

__all__ = ["Checkpoint", "CheckpointSigner", "CheckpointVerifier"]

_ROOT_SIZE: Final = 32
_KEY_SIZE: Final = 32
_SIG_SIZE: Final = 64
_KEY_ID_SIZE: Final = 4
_ALG_ED25519: Final = b"\x01"
_MAX_SIZE: Final = 1 << 64
_SIG_PREFIX: Final = "\u2014 "  # em dash, space
# The Go reference stops at 100; C2SP requires at least 16 be accepted.
_MAX_SIGNATURES: Final = 100
# ASCII digits only: int() would also take "+1", " 1", "1_0" and Arabic-Indic
# digits, each a second spelling of the same signed size.
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]*")
_CONTROL: Final = re.compile(r"[\x00-\x09\x0b-\x1f]")
_HEX8: Final = re.compile(r"[0-9a-fA-F]{8}")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A log's signed tree head: who (origin), how big (size), what (root)."""

    origin: str
    size: int
    root: bytes

    def __post_init__(self) -> None:
        # Anything that would not survive body() -> parse unchanged is
        # refused here, so a signer can never sign text meaning something else.
        if not self.origin:
            raise ValueError("checkpoint origin is empty")
        if any(c < " " for c in self.origin):
            raise ValueError("checkpoint origin contains a newline or control character")
        if not 0 <= self.size < _MAX_SIZE:
            raise ValueError(f"checkpoint size {self.size} does not fit in a u64")
        if len(self.root) != _ROOT_SIZE:
            raise ValueError(f"checkpoint root is {len(self.root)} bytes, not {_ROOT_SIZE}")

    def body(self) -> bytes:
        """The note text: origin, decimal size, base64 root, one per line."""
        root64 = base64.b64encode(self.root).decode("ascii")
        return f"{self.origin}\n{self.size}\n{root64}\n".encode()


class CheckpointSigner:
    """An Ed25519 key that signs checkpoints under a C2SP key name."""

    __slots__ = ("_key", "key_name", "public_key")

    key_name: str
    public_key: bytes

    def __init__(self, key_name: str, key: Ed25519PrivateKey) -> None:
        _require_key_name(key_name)
        self.key_name = key_name
        self._key = key
        self.public_key = key.public_key().public_bytes_raw()

    @classmethod
    def generate(cls, key_name: str) -> CheckpointSigner:
        return cls(key_name, Ed25519PrivateKey.generate())

    @classmethod
    def from_private_bytes(cls, key_name: str, seed: bytes) -> CheckpointSigner:
        """From the 32-byte RFC 8032 seed (what :attr:`private_bytes` returns)."""
        if len(seed) != _KEY_SIZE:
            raise ValueError(f"Ed25519 seed is {len(seed)} bytes, not {_KEY_SIZE}")
        return cls(key_name, Ed25519PrivateKey.from_private_bytes(bytes(seed)))

    @property
    def private_bytes(self) -> bytes:
        return self._key.private_bytes_raw()

    def verifier(self) -> CheckpointVerifier:
        return CheckpointVerifier(self.key_name, self.public_key)

    def sign(self, checkpoint: Checkpoint) -> str:
        """The complete signed note for ``checkpoint``."""
        return self.sign_text(checkpoint.body().decode())

    def sign_text(self, text: str) -> str:
        """Sign arbitrary note text (non-empty, ending in a newline)."""
        if not text.endswith("\n"):
            raise ValueError("note text must end with a newline")
        if _CONTROL.search(text):
            raise ValueError("note text contains a control character")
        signature = self._key.sign(text.encode())
        blob = base64.b64encode(self.verifier().key_id + signature).decode("ascii")
        return f"{text}\n{_SIG_PREFIX}{self.key_name} {blob}\n"

    def __repr__(self) -> str:
        # Never the seed: reprs end up in logs and tracebacks.
        return f"CheckpointSigner({self.verifier().vkey()!r})"


class CheckpointVerifier:
    """Checks notes signed by one Ed25519 key under one C2SP key name."""

    __slots__ = ("_key", "key_id", "key_name", "public_key")

    key_name: str
    public_key: bytes
    key_id: bytes

    def __init__(self, key_name: str, public_key: bytes) -> None:
        _require_key_name(key_name)
        if len(public_key) != _KEY_SIZE:
            raise ValueError(f"Ed25519 public key is {len(public_key)} bytes, not {_KEY_SIZE}")
        self.key_name = key_name
        self.public_key = bytes(public_key)
        self.key_id = _key_id(key_name, self.public_key)
        self._key = Ed25519PublicKey.from_public_bytes(self.public_key)

    def vkey(self) -> str:
        """The C2SP verifier key: ``name+keyid+base64(0x01 || public key)``."""
        key64 = base64.b64encode(_ALG_ED25519 + self.public_key).decode("ascii")
        return f"{self.key_name}+{self.key_id.hex()}+{key64}"

    @classmethod
    def from_vkey(cls, vkey: str) -> CheckpointVerifier:
        """Parse a verifier key; ``ValueError`` if malformed or self-inconsistent."""
        # Split on the first two '+' only: the base64 part may contain '+'.
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise ValueError("verifier key is not name+keyid+key")
        name, id_hex, key64 = parts
        if not _HEX8.fullmatch(id_hex):
            raise ValueError("verifier key id is not 8 hex digits")
        key = _strict_b64decode(key64)
        if key is None:
            raise ValueError("verifier key material is not valid base64")
        if not key or key[:1] != _ALG_ED25519:
            raise ValueError("verifier key is not an Ed25519 (type 0x01) key")
        if len(key) != 1 + _KEY_SIZE:
            raise ValueError(f"verifier key is {len(key) - 1} bytes, not {_KEY_SIZE}")
        verifier = cls(name, key[1:])
        if verifier.key_id != bytes.fromhex(id_hex):
            raise ValueError("verifier key id does not match its name and key")
        return verifier

    def verify_text(self, note: str) -> str:
        """Check ``note`` carries a valid signature by this key; return its text.

        Signatures by other keys are ignored, as C2SP requires; a signature
        that claims this key and fails is fatal, even next to a good one.
        """
        if _CONTROL.search(note):
            raise ProofError("malformed note: contains a control character")
        try:
            note.encode()
        except UnicodeEncodeError:
            raise ProofError("malformed note: not valid UTF-8") from None
        # C2SP: the text ends at the *last* blank line; the text itself may
        # contain blank lines.
        split = note.rfind("\n\n")
        if split < 0:
            raise ProofError("malformed note: no blank line before the signatures")
        text, sigs = note[: split + 1], note[split + 2 :]
        if not sigs or not sigs.endswith("\n"):
            raise ProofError("malformed note: signature block does not end with a newline")
        lines = sigs[:-1].split("\n")
        if len(lines) > _MAX_SIGNATURES:
            raise ProofError(f"malformed note: more than {_MAX_SIGNATURES} signature lines")

        verified = False
        for number, line in enumerate(lines, 1):
            if not line.startswith(_SIG_PREFIX):
                raise ProofError(
                    f"malformed note: signature line {number} does not start with '— '"
                )
            name, sep, blob64 = line[len(_SIG_PREFIX) :].partition(" ")
            if not sep or not _is_key_name(name):
                raise ProofError(f"malformed note: signature line {number} has no valid key name")
            blob = _strict_b64decode(blob64)
            if blob is None:
                raise ProofError(f"malformed note: signature line {number} is not valid base64")
            if len(blob) <= _KEY_ID_SIZE:
                raise ProofError(f"malformed note: signature line {number} is too short")
            if name != self.key_name or blob[:_KEY_ID_SIZE] != self.key_id:
                continue
            signature = blob[_KEY_ID_SIZE:]
            if len(signature) != _SIG_SIZE:
                raise ProofError(
                    f"signature by {self._label()} is {len(signature)} bytes, not {_SIG_SIZE}"
                )
            try:
                self._key.verify(signature, text.encode())
            except InvalidSignature:
                raise ProofError(f"signature by {self._label()} does not verify") from None
            verified = True
        if not verified:
            raise ProofError(f"note has no signature by {self._label()}")
        return text

    def verify(self, note: str) -> Checkpoint:
        """Check the signature, then parse the text as a tlog checkpoint."""
        return _parse_body(self.verify_text(note))

    def _label(self) -> str:
        return f"{self.key_name}+{self.key_id.hex()}"

    def __repr__(self) -> str:
        return f"CheckpointVerifier({self.vkey()!r})"


def _parse_body(text: str) -> Checkpoint:
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise ProofError(f"malformed checkpoint: {len(lines)} lines, expected 3")
    if len(lines) > 3:
        # Extension lines are legal C2SP but Checkpoint cannot carry them:
        # accepting them would drop signed content without a trace.
        raise ProofError("malformed checkpoint: unexpected extension lines")
    origin, size_line, root_line = lines
    if not origin:
        raise ProofError("malformed checkpoint: empty origin")
    if not _DECIMAL.fullmatch(size_line):
        raise ProofError("malformed checkpoint: size is not a canonical decimal")
    size = int(size_line)
    if size >= _MAX_SIZE:
        raise ProofError("malformed checkpoint: size does not fit in a u64")
    root = _strict_b64decode(root_line)
    if root is None:
        raise ProofError("malformed checkpoint: root is not canonical base64")
    if len(root) != _ROOT_SIZE:
        raise ProofError(f"malformed checkpoint: root is {len(root)} bytes, not {_ROOT_SIZE}")
    return Checkpoint(origin=origin, size=size, root=root)


def _key_id(key_name: str, public_key: bytes) -> bytes:
    """C2SP signed-note key ID: SHA-256(name || 0x0A || 0x01 || key)[:4]."""
    digest = hashlib.sha256(key_name.encode() + b"\n" + _ALG_ED25519 + public_key).digest()
    return digest[:_KEY_ID_SIZE]


def _is_key_name(name: str) -> bool:
    # C2SP: non-empty, no Unicode spaces, no '+'. Control characters are
    # banned from whole notes anyway; refusing them here keeps a signer from
    # emitting a note no verifier would accept.
    return bool(name) and not any(c == "+" or c.isspace() or c < " " for c in name)


def _require_key_name(name: str) -> None:
    if not _is_key_name(name):
        raise ValueError(f"invalid key name {name!r}: empty, or contains a space or '+'")


def _strict_b64decode(text: str) -> bytes | None:
    """Standard padded base64, only in its one canonical spelling."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    # b64decode ignores non-zero padding bits; re-encoding catches those.
    if base64.b64encode(raw).decode("ascii") != text:
        return None
    return raw
