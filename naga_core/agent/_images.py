"""Images of a user message on their way to the model (docs/adr/0047-vision16-images.md).

A turn carries its images as references (ImagePart: the sealed blob's
digest, MIME type, size); the ledger, the executor and the model-call
traces hold only those. The core fills in the bytes only in the request it
hands the provider plugin, and only for a provider that declares
``vision``; any other model gets a short placeholder naming each image
and saying it cannot see it, so the user still gets an answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from naga.constants import (
    IMAGE_TOKENS,
    MAX_IMAGE_BYTES,
    MAX_IMAGES_PER_TURN,
    MAX_TURN_IMAGE_BYTES,
)
from naga.media import sniff
from naga.v1 import model_pb2 as mpb
from naga_core.agent._errors import BadImages
from naga_core.errors import NagaError
from naga_core.memory import Sealer

#: The image types sent to a vision model (what the providers all accept).
IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def check(images: Sequence[mpb.ImagePart]) -> None:
    """Refuse (BadImages) images a turn may not carry."""
    if len(images) > MAX_IMAGES_PER_TURN:
        raise BadImages(
            f"a message may carry at most {MAX_IMAGES_PER_TURN} images, not {len(images)}"
        )
    for n, image in enumerate(images):
        if len(image.blob) != 32:
            raise BadImages(f"image {n}: its blob is not a SHA-256 digest")
        if image.mime not in IMAGE_MIMES:
            raise BadImages(
                f"image {n}: {image.mime or 'no type'} is not an image type a model takes "
                f"({', '.join(sorted(IMAGE_MIMES))})"
            )
        if not 0 < image.size <= MAX_IMAGE_BYTES:
            raise BadImages(
                f"image {n}: {image.size} bytes; at most {MAX_IMAGE_BYTES} are sent to a model"
            )
        if image.data:
            raise BadImages(f"image {n}: a turn names images by blob, never carries their bytes")
    total = sum(i.size for i in images)
    if total > MAX_TURN_IMAGE_BYTES:
        raise BadImages(
            f"the images come to {total} bytes; at most {MAX_TURN_IMAGE_BYTES} go with one message"
        )


def placeholder(image: mpb.ImagePart, why: str) -> str:
    return f"[an image ({image.mime}, {image.size} bytes) is not shown: {why}]"


def for_provider(
    request: mpb.ChatRequest,
    *,
    vision: bool,
    own: Sequence[mpb.ImagePart],
    subject: str,
    sealer: Sealer,
    read: Callable[[bytes], bytes],
) -> mpb.ChatRequest:
    """``request`` as the provider gets it: each image part with its bytes
    (``vision``) or replaced by a placeholder in the text. Only the turn's
    own images (``own``) sealed under its ``subject`` are opened: a part the
    executor made up names nothing it may read."""
    if not any(m.images for m in request.messages):
        return request
    out = mpb.ChatRequest()
    out.CopyFrom(request)
    allowed = {i.blob for i in own}
    for message in out.messages:
        if not message.images:
            continue
        parts = list(message.images)
        del message.images[:]
        notes: list[str] = []
        for part in parts:
            if not vision:
                notes.append(placeholder(part, "this model cannot see images"))
                continue
            data = _open(part, allowed, subject, sealer, read)
            if isinstance(data, str):
                notes.append(placeholder(part, data))
                continue
            message.images.append(
                mpb.ImagePart(blob=part.blob, mime=part.mime, size=len(data), data=data)
            )
        if notes:
            message.content = (
                "\n".join([message.content, *notes]) if message.content else ("\n".join(notes))
            )
    return out


def _open(
    part: mpb.ImagePart,
    allowed: set[bytes],
    subject: str,
    sealer: Sealer,
    read: Callable[[bytes], bytes],
) -> bytes | str:
    """The image's bytes, or why it cannot be sent."""
    if part.blob not in allowed:
        return "it is not one of this turn's images"
    try:
        raw = read(part.blob)
    except (OSError, NagaError):  # a missing blob is a placeholder, not a failed turn
        return "its blob could not be read"
    if sealer.blob_subject(raw) not in (subject, None):
        return "it was not sent by this turn's sender"
    data = sealer.open_blob(raw)
    if data is None:
        return "its sender was forgotten"
    if len(data) > MAX_IMAGE_BYTES or sniff(data) != part.mime:
        return "its bytes are not the image it was said to be"
    return data


__all__ = [
    "IMAGE_MIMES",
    "IMAGE_TOKENS",
    "MAX_IMAGES_PER_TURN",
    "MAX_IMAGE_BYTES",
    "MAX_TURN_IMAGE_BYTES",
    "check",
    "for_provider",
    "placeholder",
]
