"""AES-128-ECB with PKCS#7, as the iLink CDN uses it (both ways)."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def encrypt(key: bytes, plaintext: bytes) -> bytes:
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(padded) + enc.finalize()


def decrypt(key: bytes, ciphertext: bytes) -> bytes:
    dec = Cipher(algorithms.AES(key), modes.ECB()).decryptor()
    padded = dec.update(ciphertext) + dec.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(padded) + unpadder.finalize()


def key_field(key: bytes, form: str) -> str:
    """``media.aes_key`` in one of the protocol's two encodings: base64 of the
    16 raw bytes ("raw", seen on images) or base64 of the 32-character hex
    text ("hex", seen on files, voice, video)."""
    if form == "raw":
        return base64.b64encode(key).decode()
    return base64.b64encode(key.hex().encode()).decode()
