"""Outbound media (issue 16, ILINK_PROTOCOL.md section 4) end to end: a real
core, the sandboxed WeChat plugin behind the egress proxy and the fake
iLink server over real HTTP. The plugin encrypts with a fresh AES-128 key,
asks getuploadurl, posts the ciphertext to the CDN and sends the item; the
fake checks size, padding and MD5, and the test decrypts what it stored
with the key the message carried. Each send is an irreversible effect; a
user who never wrote, an empty file and an unknown binding are refused by
name."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from naga.sdk import errors
from naga_core.cli import main as cli_main
from tests.fakes.ilink import _crypto
from tests.fakes.model_server import Reply
from tests.wechat.conftest import World, say

USER = "out-owner@im.wechat"


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x10\x80\xf0" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _sent_media(world: World, kind: int) -> dict[str, Any]:
    sent = [s for s in world.ilink.server.sent if s.user == USER and s.kind == kind]
    assert sent, [(s.user, s.kind) for s in world.ilink.server.sent]
    return sent[-1].item


def _plain(world: World, media: dict[str, Any]) -> bytes:
    assert media["encrypt_type"] == 1
    key_hex = base64.b64decode(media["aes_key"]).decode("ascii")  # base64 of 32 hex characters
    assert len(key_hex) == 32
    blob = world.ilink.server.media[media["encrypt_query_param"]]
    return _crypto.decrypt(bytes.fromhex(key_hex), blob)


def test_an_image_and_a_file_reach_the_user_encrypted_and_are_irreversible(
    world: World,
) -> None:
    binding = world.active(USER)
    world.model.script(Reply.answer("hello"))
    say(world, binding.bot_id, USER, "send me the chart")
    assert world.ilink.until(lambda s: s.texts_to(USER)) == ["hello"]

    image = _png(7, 5)
    done = world.client.wechat_send_file(binding.bot_id, USER, image, image=True)
    item = _sent_media(world, 2)["image_item"]
    assert _plain(world, item["media"]) == image
    # mid_size is the ciphertext's size: whole blocks, one more for padding.
    assert item["mid_size"] == (len(image) // 16 + 1) * 16
    assert done.size == len(image)

    report = b"%PDF-1.4\n" + bytes(range(256)) * 40
    world.client.wechat_send_file(binding.bot_id, USER, report, file_name="report.pdf")
    file_item = _sent_media(world, 4)["file_item"]
    assert (file_item["file_name"], file_item["len"]) == ("report.pdf", str(len(report)))
    assert _plain(world, file_item["media"]) == report

    # Each send is one irreversible effect, in words.
    entries = world.client.history(limit=50).entries
    by_seq = {e.seq: e for e in entries}
    assert by_seq[done.seq].irreversible
    assert by_seq[done.seq].description.startswith(
        f"wechat: sent image {done.sha256[:12]!r} to wechat:"
    )
    assert any(
        e.description.startswith("wechat: sent file 'report.pdf' to ") and e.irreversible
        for e in entries
    )
    # The outbox is emptied: the plaintext stays nowhere in the plugin's directory.
    assert not list((Path(world.home) / "work" / "plugins" / "wechat" / "outbox").iterdir())


def test_the_cli_sends_a_file_and_names_what_is_wrong(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binding = world.active(USER)
    # WeChat carries a file only in reply to the user: they write first
    # (so the test stands alone, not on the test above's message).
    world.model.script(Reply.answer("send it over"))
    say(world, binding.bot_id, USER, "my shopping list please")
    assert world.ilink.until(lambda s: "send it over" in s.texts_to(USER))
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"milk, eggs\n")
    args = ["wechat", "send", binding.bot_id, USER, str(notes), "--home", world.home]
    assert cli_main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["size"] == len(b"milk, eggs\n")
    assert _sent_media(world, 4)["file_item"]["file_name"] == "notes.txt"
    missing = str(tmp_path / "nope.bin")
    assert cli_main(["wechat", "send", binding.bot_id, USER, missing, "--home", world.home]) != 0
    assert f"cannot read {missing}: No such file or directory" in capsys.readouterr().err


def test_a_send_that_cannot_go_is_refused_by_name(world: World) -> None:
    binding = world.active(USER)
    with pytest.raises(errors.FailedPrecondition, match="has not written to bot"):
        world.client.wechat_send_file(binding.bot_id, "stranger@im.wechat", b"x", file_name="a")
    with pytest.raises(errors.InvalidArgument, match="data is empty"):
        world.client.wechat_send_file(binding.bot_id, USER, b"", file_name="a")
    with pytest.raises(errors.InvalidArgument, match="file_name is required"):
        world.client.wechat_send_file(binding.bot_id, USER, b"abc")
    with pytest.raises(errors.NotFound, match="no binding 'nosuch'"):
        world.client.wechat_send_file("nosuch", USER, b"abc", file_name="a")
