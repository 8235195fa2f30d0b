"""The three layers of keys (docs/adr/0026-memory-key-hierarchy.md).

* the master key: 32 random bytes in ``keys/memory.key`` (0600);
* a subject key (KEK) per subject, AES-256-GCM-wrapped by the master with
  the subject's name and the key's id as associated data;
* a data key per item, wrapped by its subject's key, with the item's id and
  subject as associated data; the item's text sealed under the data key
  with the same associated data.

Every box is ``nonce (12 bytes) || ciphertext+tag``. A box moved to another
item, subject or key id fails to open: the associated data binds it.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from naga_core.memory._errors import MemoryKeyError

KEY_BYTES = 32
NONCE_BYTES = 12
_TAG_BYTES = 16
_KEK_AAD = b"naga-memory-kek v1\0"
_DEK_AAD = b"naga-memory-dek v1\0"
_ITEM_AAD = b"naga-memory-item v1\0"


def _aad(prefix: bytes, *parts: str) -> bytes:
    # Length-prefixed: ("ab", "c") and ("a", "bc") never share bytes.
    out = bytearray(prefix)
    for p in parts:
        raw = p.encode()
        out += len(raw).to_bytes(4, "big") + raw
    return bytes(out)


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_box(key: bytes, box: bytes, aad: bytes, what: str) -> bytes:
    if len(box) < NONCE_BYTES + _TAG_BYTES:
        raise MemoryKeyError(f"{what}: {len(box)} bytes is too short for a sealed box")
    try:
        return AESGCM(key).decrypt(box[:NONCE_BYTES], box[NONCE_BYTES:], aad)
    except InvalidTag:
        raise MemoryKeyError(f"{what} does not authenticate (tampered, or another key's)") from None


def wrap_kek(master: bytes, kek: bytes, subject: str, kek_id: str) -> bytes:
    return seal(master, kek, _aad(_KEK_AAD, subject, kek_id))


def unwrap_kek(master: bytes, box: bytes, subject: str, kek_id: str) -> bytes:
    kek = open_box(master, box, _aad(_KEK_AAD, subject, kek_id), f"the key of {subject}")
    if len(kek) != KEY_BYTES:
        raise MemoryKeyError(f"the key of {subject} unwraps to {len(kek)} bytes, not {KEY_BYTES}")
    return kek


def seal_item(kek: bytes, item_id: str, subject: str, text: bytes) -> tuple[bytes, bytes]:
    """A fresh data key for one item: (the data key wrapped by ``kek``, the
    text sealed under the data key)."""
    dek = AESGCM.generate_key(bit_length=KEY_BYTES * 8)
    wrapped = seal(kek, dek, _aad(_DEK_AAD, item_id, subject))
    return wrapped, seal(dek, text, _aad(_ITEM_AAD, item_id, subject))


def open_item(kek: bytes, item_id: str, subject: str, wrapped: bytes, box: bytes) -> bytes:
    dek = open_box(kek, wrapped, _aad(_DEK_AAD, item_id, subject), f"the data key of {item_id}")
    if len(dek) != KEY_BYTES:
        raise MemoryKeyError(f"the data key of {item_id} is {len(dek)} bytes, not {KEY_BYTES}")
    return open_box(dek, box, _aad(_ITEM_AAD, item_id, subject), f"item {item_id}")


def new_key() -> bytes:
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


__all__ = [
    "KEY_BYTES",
    "NONCE_BYTES",
    "new_key",
    "open_box",
    "open_item",
    "seal",
    "seal_item",
    "unwrap_kek",
    "wrap_kek",
]
