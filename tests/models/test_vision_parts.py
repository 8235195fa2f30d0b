"""Images in model requests (docs/adr/0047-vision16-images.md): the
adapters' wire forms (over loopback HTTP to the fake model server), the
core's bounds and its filling-in of the bytes for a vision provider only,
and the vision flag of providers.json."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
import trio

from naga.v1 import model_pb2 as mpb
from naga_core._providers import Providers
from naga_core.agent import BadImages
from naga_core.agent._images import (
    MAX_IMAGE_BYTES,
    MAX_IMAGES_PER_TURN,
    check,
    for_provider,
)
from naga_core.agent._prompt import IMAGE_TOKENS, MESSAGE_TOKENS, message_tokens
from naga_core.memory import Sealer
from tests.fakes.model_server import Reply
from tests.models.support import rig

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def _with_image(data: bytes = PNG) -> mpb.ChatRequest:
    part = mpb.ImagePart(blob=hashlib.sha256(data).digest(), mime="image/png", size=len(data))
    part.data = data
    return mpb.ChatRequest(
        messages=[
            mpb.ChatMessage(role=mpb.ROLE_SYSTEM, content="sys"),
            mpb.ChatMessage(role=mpb.ROLE_USER, content="what is this?", images=[part]),
        ]
    )


def test_openai_sends_the_text_and_a_data_url_part() -> None:
    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer("a picture"))
            await r.adapter.complete(_with_image())
            (sent,) = r.server.requests
            assert sent.json()["messages"][1] == {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {
                        "type": "image_url",
                        "image_url": {
                            "url": "data:image/png;base64," + base64.b64encode(PNG).decode()
                        },
                    },
                ],
            }

    trio.run(main)


def test_anthropic_sends_a_base64_image_block_before_the_text() -> None:
    async def main() -> None:
        async with rig("anthropic") as r:
            r.server.script(Reply.answer("a picture"))
            await r.adapter.complete(_with_image())
            (sent,) = r.server.requests
            assert sent.json()["messages"] == [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": base64.b64encode(PNG).decode(),
                            },
                        },
                        {"type": "text", "text": "what is this?"},
                    ],
                }
            ]

    trio.run(main)


def test_a_reference_without_bytes_is_sent_as_text_only() -> None:
    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer("ok"))
            request = _with_image()
            request.messages[1].images[0].ClearField("data")
            await r.adapter.complete(request)
            (sent,) = r.server.requests
            assert sent.json()["messages"][1] == {"role": "user", "content": "what is this?"}

    trio.run(main)


def _ref(**fields: object) -> mpb.ImagePart:
    base: dict[str, object] = {"blob": b"\x01" * 32, "mime": "image/png", "size": 100}
    base.update(fields)
    return mpb.ImagePart(**base)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(
    ("images", "words"),
    [
        ([_ref()] * (MAX_IMAGES_PER_TURN + 1), "at most"),
        ([_ref(mime="application/pdf")], "is not an image type"),
        ([_ref(size=MAX_IMAGE_BYTES + 1)], "bytes; at most"),
        ([_ref(size=0)], "0 bytes"),
        ([_ref(blob=b"short")], "not a SHA-256"),
        ([_ref(data=b"x")], "never carries their bytes"),
        ([_ref(size=MAX_IMAGE_BYTES)] * 2, "go with one message"),
    ],
)
def test_bad_images_are_refused_with_a_clear_error(images: list[mpb.ImagePart], words: str) -> None:
    with pytest.raises(BadImages, match=words):
        check(images)


def test_images_count_in_the_prompt_budget() -> None:
    plain = mpb.ChatMessage(role=mpb.ROLE_USER, content="")
    assert message_tokens(plain) == MESSAGE_TOKENS
    plain.images.extend([_ref(), _ref()])
    assert message_tokens(plain) == MESSAGE_TOKENS + 2 * IMAGE_TOKENS


class _Store:
    def __init__(self) -> None:
        self.blobs: dict[bytes, bytes] = {}

    def put(self, data: bytes) -> bytes:
        digest = hashlib.sha256(data).digest()
        self.blobs[digest] = data
        return digest

    def get(self, digest: bytes) -> bytes:
        return self.blobs[digest]


def _request(part: mpb.ImagePart) -> mpb.ChatRequest:
    return mpb.ChatRequest(
        messages=[mpb.ChatMessage(role=mpb.ROLE_USER, content="look", images=[part])]
    )


def test_the_core_fills_in_only_the_turns_own_images() -> None:
    sealer = Sealer(None)  # sealing off: the blob is the plaintext
    store = _Store()
    own = _ref(blob=store.put(PNG), size=len(PNG))
    other = _ref(blob=store.put(PNG + b"other"), size=len(PNG) + 5)
    sent = for_provider(
        _request(own), vision=True, own=[own], subject="owner", sealer=sealer, read=store.get
    )
    assert sent.messages[0].images[0].data == PNG
    assert sent.messages[0].content == "look"
    # A reference the executor made up names nothing the turn may read.
    forged = for_provider(
        _request(other), vision=True, own=[own], subject="owner", sealer=sealer, read=store.get
    )
    assert not forged.messages[0].images
    assert "is not shown: it is not one of this turn's images" in forged.messages[0].content
    # Bytes that are not the image the reference says are not sent.
    lying = _ref(blob=store.put(b"%PDF-1.4 x"), size=10)
    refused = for_provider(
        _request(lying), vision=True, own=[lying], subject="owner", sealer=sealer, read=store.get
    )
    assert "are not the image it was said to be" in refused.messages[0].content
    # No vision: the placeholder, and no bytes read at all.
    blind = for_provider(
        _request(own), vision=False, own=[own], subject="owner", sealer=sealer, read=_no_read
    )
    assert not blind.messages[0].images
    assert blind.messages[0].content == (
        f"look\n[an image (image/png, {len(PNG)} bytes) is not shown: this model cannot see images]"
    )


def _no_read(digest: bytes) -> bytes:
    raise AssertionError("a model without vision needs no image bytes")


def test_providers_json_declares_vision_per_entry() -> None:
    entry = {"api": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m"}
    body = {"default": "a", "providers": {"a": {**entry, "vision": True}, "b": entry}}
    parsed = Providers.parse(json.dumps(body).encode(), "providers.json")
    assert parsed.by_name["a"].vision
    assert not parsed.by_name["b"].vision
    bad = {"providers": {"a": {**entry, "vision": "yes"}}}
    with pytest.raises(Exception, match="vision"):
        Providers.parse(json.dumps(bad).encode(), "providers.json")


def test_a_turn_re_run_after_a_stop_keeps_its_images() -> None:
    """The start's scan of open turns reads the references off the
    turn.message record (in the clear beside the sealed text), so a re-run
    turn shows the model the same images."""
    from naga.v1 import agent_pb2 as apb
    from naga_core.agent import TRACE_MESSAGE
    from naga_core.agent._recover import OpenTurns
    from naga_core.ledger import Record

    part = _ref()
    body = apb.TurnRecord(session="s", turn_id="t-1", idempotency_key="k", images=[part])
    turns = OpenTurns()
    turns.see(
        Record(
            seq=5,
            timestamp_ns=1,
            kind=TRACE_MESSAGE,
            payload=body.SerializeToString(),
            blob_refs=(part.blob,),
            prev_hash=b"",
            leaf_hash=b"",
            body=b"",
        )
    )
    (turn,) = turns.found()
    assert list(turn.images) == [part]
