"""Inbound media: the CDN blob downloaded, decrypted and checked.

Keys (ILINK_PROTOCOL.md section 4): for images ``image_item.aeskey`` (32
hex characters) is preferred; else ``media.aes_key`` is base64 of either 16
raw bytes or of 32 hex characters, and both are accepted; an image with no
key at all is plaintext. The ciphertext must be a whole number of AES
blocks with valid PKCS#7 padding; a declared size must match; the type is
sniffed from the bytes (the server's word is not taken).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from naga.media import sniff
from naga.v1 import wechat_pb2 as wpb


class MediaRefused(ValueError):
    """The blob (or its key) is not what the protocol says."""


def key_of(item: wpb.WechatItem) -> bytes | None:
    """The AES key, or None for a keyless image (plaintext)."""
    media = item.media
    if item.type == 2 and media.image_aeskey_hex:
        try:
            key = bytes.fromhex(media.image_aeskey_hex)
        except ValueError:
            raise MediaRefused("image_item.aeskey is not hex") from None
        if len(key) != 16:
            raise MediaRefused(f"image_item.aeskey is {len(key)} bytes, not 16")
        return key
    if not media.aes_key:
        if item.type == 2:
            return None
        raise MediaRefused("the media has no aes_key")
    try:
        raw = base64.b64decode(media.aes_key, validate=True)
    except (binascii.Error, ValueError):
        raise MediaRefused("media.aes_key is not base64") from None
    if len(raw) == 16:
        return raw
    if len(raw) == 32:
        try:
            return bytes.fromhex(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise MediaRefused("media.aes_key is 32 bytes but not hex text") from None
    raise MediaRefused(f"media.aes_key decodes to {len(raw)} bytes, neither 16 raw nor 32 hex")


def decrypt(key: bytes | None, blob: bytes) -> bytes:
    if key is None:
        return blob
    if not blob or len(blob) % 16:
        raise MediaRefused(f"the ciphertext is {len(blob)} bytes, not whole AES blocks")
    dec = Cipher(algorithms.AES(key), modes.ECB()).decryptor()
    padded = dec.update(blob) + dec.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        raise MediaRefused("bad PKCS#7 padding (a wrong key?)") from None


def encrypt(key: bytes, plain: bytes) -> bytes:
    """AES-128-ECB with PKCS#7 padding (a whole block more for aligned input)."""
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plain) + padder.finalize()
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(padded) + enc.finalize()


def read_outbound(work_dir: str, name: str, limit: int) -> bytes:
    """The file the core wrote for an upload: inside the work directory
    (no absolute path, no ``..``, no link out of it), at most ``limit``."""
    root = os.path.realpath(work_dir)
    path = os.path.realpath(os.path.join(root, name))
    if not name or os.path.isabs(name) or os.path.commonpath([root, path]) != root:
        raise MediaRefused(f"{name!r} is not a file of the work directory")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise MediaRefused(f"cannot read {name}: {exc.strerror}") from None
    if not data:
        raise MediaRefused(f"{name} is empty")
    if len(data) > limit:
        raise MediaRefused(f"{name} is larger than {limit} bytes")
    return data


def dimensions(data: bytes, mime: str) -> tuple[int, int]:
    """Width and height of a PNG, GIF or JPEG; (0, 0) if unknown."""
    try:
        if mime == "image/png" and len(data) >= 24:
            return struct.unpack(">II", data[16:24])
        if mime == "image/gif" and len(data) >= 10:
            return struct.unpack("<HH", data[6:10])
        if mime == "image/jpeg":
            i = 2
            while i + 9 < len(data):
                if data[i] != 0xFF:
                    return 0, 0
                marker = data[i + 1]
                length = struct.unpack(">H", data[i + 2 : i + 4])[0]
                if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                    height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                    return width, height
                i += 2 + length
    except struct.error:
        return 0, 0
    return 0, 0


def check(item: wpb.WechatItem, blob: bytes, plain: bytes) -> None:
    declared = item.declared_size
    if item.type == 4 and declared and len(plain) != declared:
        raise MediaRefused(f"the file is {len(plain)} bytes, not the {declared} declared")
    if item.type in (2, 5) and declared and len(blob) != declared:
        raise MediaRefused(f"the blob is {len(blob)} bytes, not the {declared} declared")


def store(work_dir: str, plain: bytes, item: wpb.WechatItem) -> wpb.WechatMediaResult:
    digest = hashlib.sha256(plain).hexdigest()
    folder = os.path.join(work_dir, "media")
    os.makedirs(folder, exist_ok=True)
    name = os.path.join("media", digest)
    with open(os.path.join(work_dir, name), "wb") as f:
        f.write(plain)
    mime = sniff(plain)
    width, height = dimensions(plain, mime)
    if item.type == 2 and not mime.startswith("image/"):
        raise MediaRefused(f"an image whose bytes are {mime}")
    return wpb.WechatMediaResult(
        sha256=digest, size=len(plain), mime=mime, width=width, height=height, file=name
    )


__all__ = [
    "MediaRefused",
    "check",
    "decrypt",
    "dimensions",
    "encrypt",
    "key_of",
    "read_outbound",
    "sniff",
    "store",
]
