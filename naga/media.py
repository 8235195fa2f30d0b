"""What a file is, by its first bytes: one table for every reader (the
WeChat plugin naming downloaded media, the core checking an image before a
vision model gets it, the send-file tool choosing image or file)."""

from __future__ import annotations

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"#!SILK_V3", "audio/silk"),
    (b"\x02#!SILK_V3", "audio/silk"),
    (b"#!AMR", "audio/amr"),
    (b"PK\x03\x04", "application/zip"),
)
UNKNOWN = "application/octet-stream"


def sniff(data: bytes) -> str:
    """The MIME type ``data`` starts as; :data:`UNKNOWN` if none."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[4:8] == b"ftyp":
        return "video/mp4"
    return UNKNOWN


def is_image(data: bytes) -> bool:
    return sniff(data).startswith("image/")


__all__ = ["UNKNOWN", "is_image", "sniff"]
