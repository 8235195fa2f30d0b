"""Vision (issue 16, docs/adr/0047-vision16-images.md), through the real
core, its executor and provider plugin, the sandboxed WeChat plugin and the
fake iLink server with its CDN: an image a WeChat user sends reaches a
provider that declares ``vision`` as an OpenAI content part holding the
exact bytes decrypted from the CDN, as a data URL; a provider without it
gets a placeholder naming the image; an image too large for a model is
described only; the user is answered every time; and no image plaintext
lies under $NAGA_HOME outside the workspace."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import struct
import zlib
from typing import Any

import pytest

from naga.sdk.errors import InvalidArgument
from naga.v1 import model_pb2 as mpb
from naga_core.wechat import session_of
from tests.agent.conftest import final, write_providers
from tests.canary_helpers import files_holding
from tests.fakes.model_server import Reply
from tests.wechat.conftest import World, sent_texts

OWNER = "wxid_vision_owner"


def _png(width: int, height: int, tail: bytes) -> bytes:
    ihdr = struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00"
    chunk = b"IHDR" + ihdr
    crc = struct.pack(">I", zlib.crc32(chunk))
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + crc + tail


def _providers(world: World, *, vision: bool) -> None:
    # providers.json is followed while the core runs (the next call reads it).
    write_providers(world.home, world.model.server.openai_url, vision=vision)


def _ask(world: World, item: dict[str, Any] | str, answer: str) -> list[dict[str, Any]]:
    """Send ``item`` from the owner; the user is answered ``answer``; the
    messages of the model request that answered it."""
    binding = world.active(OWNER)
    server = world.ilink.server
    seen = len(world.model.server.requests)
    world.model.script(Reply.answer(answer))
    if isinstance(item, str):
        world.ilink.run(server.user_says, binding.bot_id, OWNER, item)
    else:
        world.ilink.run(server.user_sends, binding.bot_id, OWNER, [item])
    world.ilink.until(lambda s: answer in s.texts_to(OWNER))
    assert answer in sent_texts(world, OWNER)
    (request,) = [
        r for r in world.model.server.requests[seen:] if r.path.endswith("/chat/completions")
    ]
    return request.json()["messages"]


def test_a_vision_provider_gets_the_exact_image_as_a_data_url_and_history_a_description(
    world: World,
) -> None:
    _providers(world, vision=True)
    canary = secrets.token_bytes(48)
    png = _png(64, 48, canary)
    server = world.ilink.server
    item = world.ilink.run(
        lambda: server.media_item(png, kind=2, key_form="raw", key=secrets.token_bytes(16))
    )
    messages = _ask(world, item, "a small picture")
    user = messages[-1]
    assert user["role"] == "user"
    text, image = user["content"]
    assert text["type"] == "text"
    assert text["text"].startswith(f"[an image: image/png, {len(png)} bytes, 64x48, sha256 ")
    # The very bytes the CDN held (decrypted), not a re-encoding.
    assert image == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
    }
    # The next message: the image stays in history as its description,
    # not sent again (adr 0047: the prompt budget).
    later = _ask(world, "and now?", "still small")
    earlier = [m for m in later if m["role"] == "user"][:-1]
    assert any(
        isinstance(m["content"], str) and m["content"].startswith("[an image: image/png")
        for m in earlier
    )
    assert all(isinstance(m["content"], str) for m in later)
    # Sealed everywhere it is kept (the blob, the turn's records, the
    # model-call traces, which hold only the reference): no plaintext under
    # the home outside the workspace, raw or as the data URL's base64.
    needles = [canary, base64.b64encode(png)[8:60]]
    assert os.listdir(os.path.join(world.home, "blobs"))  # the scan is not of an empty home
    assert files_holding(world.home, needles) == []


def test_a_provider_without_vision_gets_a_placeholder_and_the_user_an_answer(
    world: World,
) -> None:
    _providers(world, vision=False)
    png = _png(32, 16, secrets.token_bytes(32))
    server = world.ilink.server
    item = world.ilink.run(lambda: server.media_item(png, kind=2, key_form="hex"))
    user = _ask(world, item, "I cannot see it")[-1]
    assert isinstance(user["content"], str)
    assert user["content"].startswith(f"[an image: image/png, {len(png)} bytes, 32x16")
    assert user["content"].endswith(
        f"[an image (image/png, {len(png)} bytes) is not shown: this model cannot see images]"
    )


def test_bad_media_is_refused_or_described_and_the_user_answered(world: World) -> None:
    _providers(world, vision=True)
    server = world.ilink.server
    # Not an image: refused by the plugin's sniffing, said in the message.
    pdf = world.ilink.run(
        lambda: server.media_item(b"%PDF-1.4 not a picture", kind=2, key_form="raw")
    )
    user = _ask(world, pdf, "no picture there")[-1]
    assert isinstance(user["content"], str)
    assert user["content"].startswith("[an image that could not be used:")
    # Larger than a model is sent (5 MiB): archived and described, not sent.
    big = _png(10, 10, b"\x00" * (5 * 1024 * 1024))
    item = world.ilink.run(lambda: server.media_item(big, kind=2, key_form="raw"))
    user = _ask(world, item, "too big to look at")[-1]
    assert isinstance(user["content"], str)
    assert f"{len(big)} bytes" in user["content"]
    assert (
        "not shown to the model: larger than the 5242880 bytes a model is sent]"
        in (user["content"])
    )


def test_turn_service_refuses_bad_images_and_never_opens_anothers(world: World) -> None:
    """The owner's own RunTurn (the SDK): bounds and types refused before
    anything is recorded; a reference to another sender's sealed image
    (a WeChat user's, not the owner's) is not opened for the owner's turn."""
    _providers(world, vision=True)
    digest = hashlib.sha256(b"x").digest()
    bad = [
        ([mpb.ImagePart(blob=digest, mime="application/pdf", size=10)], "not an image type"),
        ([mpb.ImagePart(blob=digest, mime="image/png", size=6 << 20)], "at most 5242880"),
        ([mpb.ImagePart(blob=digest, mime="image/png", size=10)] * 5, "at most 4 images"),
    ]
    for images, words in bad:
        with pytest.raises(InvalidArgument, match=words):
            list(world.client.run_turn("s-vision-bad", "look", secrets.token_hex(4), images=images))
    # A stranger's image, archived sealed under the stranger's key.
    binding = world.active(OWNER)
    png = _png(8, 8, secrets.token_bytes(16))
    server = world.ilink.server
    item = world.ilink.run(lambda: server.media_item(png, kind=2, key_form="raw"))
    stranger = "wxid_vision_stranger"
    world.model.script(Reply.answer("hello stranger"))
    world.ilink.run(server.user_sends, binding.bot_id, stranger, [item])
    world.ilink.until(lambda s: "hello stranger" in s.texts_to(stranger))
    asked = world.client.session_history(session_of(binding.bot_id, stranger))[0].text
    kept = re.search(r"kept sealed in the blob store as ([0-9a-f]{64})", asked)
    assert kept is not None, asked
    theirs = mpb.ImagePart(blob=bytes.fromhex(kept.group(1)), mime="image/png", size=len(png))
    seen = len(world.model.server.requests)
    world.model.script(Reply.answer("nothing to see"))
    events = list(world.client.run_turn("s-vision-owner", "look", "k-owner", images=[theirs]))
    assert final(events).text == "nothing to see"
    (request,) = world.model.server.requests[seen:]
    user = request.json()["messages"][-1]
    assert user["content"] == (
        f"look\n[an image (image/png, {len(png)} bytes) is not shown: it was not sent by "
        "this turn's sender]"
    )
