"""The WeChat plugin end to end: a real core, the sandboxed plugin behind
the egress proxy, the fake iLink server and the fake model: binding by QR,
text in and out, long replies in parts, the typing timeline, dedupe under
redelivery, -14 and re-binding, -2 retried with the same client_id, bad
answers from the server, two bindings and three users kept apart."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
import struct
import subprocess
import sys
import zlib

import pytest

from naga.v1 import turn_pb2 as tpb
from naga.v1 import wechat_pb2 as wpb
from naga_core._home import Home
from naga_core._store import blob_store
from naga_core.cli import main as cli_main
from naga_core.memory import Sealer
from naga_core.wechat import chunks, session_of
from tests.daemon.conftest import REPO
from tests.fakes.ilink import Response
from tests.fakes.model_server import Reply
from tests.wechat.conftest import CHANNEL, World, say, sent_texts

OWNER = "owner@im.wechat"


def test_bind_by_qr_then_a_message_is_answered_with_typing_around_the_turn(world: World) -> None:
    binding = world.bind(OWNER)
    assert binding.status == wpb.WECHAT_BINDING_STATUS_ACTIVE
    assert binding.owner_user_id == OWNER
    world.model.script(Reply.answer("hello from naga"))
    say(world, binding.bot_id, OWNER, "hi there")
    assert world.ilink.until(lambda s: s.texts_to(OWNER)) == ["hello from naga"]
    server = world.ilink.server
    (sent,) = [s for s in server.sent if s.user == OWNER]
    world.ilink.until(lambda s: any(t.status == 2 for t in s.typing))
    typing = [t for t in server.typing if t.user == OWNER]
    assert typing[0].status == 1
    assert typing[-1].status == 2
    # Typing from the message on, kept alive, stopped as the reply leaves.
    assert typing[0].at <= sent.at
    assert [t.status for t in typing].count(2) == 1
    assert world.until(lambda: world.binding(binding.bot_id).sent == 1)
    # The token never reaches the ledger; its file is the core's, 0600.
    bot = server.bots[binding.bot_id]
    assert not any(bot.token in line for line in world.history())
    creds = os.path.join(world.home, "credentials", "wechat")
    for name in os.listdir(creds):
        assert stat.S_IMODE(os.stat(os.path.join(creds, name)).st_mode) == 0o600
    # The turn ran in the (binding, user) session, at the owner's trust.
    history = world.client.session_history(session_of(binding.bot_id, OWNER))
    assert [e.text for e in history][:2] == ["hi there", "hello from naga"]


def test_a_long_reply_goes_in_parts_within_the_limit_in_order(world: World) -> None:
    binding = world.active(OWNER)
    text = ("Lorem ipsum dolor sit amet. " * 40 + "\n\n") * 4
    world.model.script(Reply.answer(text))
    before = len(sent_texts(world, OWNER))
    say(world, binding.bot_id, OWNER, "long please")
    expected = chunks(text)
    assert len(expected) > 1
    world.ilink.until(lambda s: len(s.texts_to(OWNER)) >= before + len(expected))
    got = sent_texts(world, OWNER)
    assert got[before:] == expected
    assert "".join(got[before:]) == text
    assert all(len(p) <= 2000 for p in got[before:])


def test_a_redelivered_message_is_answered_once(world: World) -> None:
    binding = world.active(OWNER)
    world.model.script(Reply.answer("only once"))
    before = len(sent_texts(world, OWNER))
    message = say(world, binding.bot_id, OWNER, "once?")
    world.ilink.until(lambda s: len(s.texts_to(OWNER)) == before + 1)
    bot = world.ilink.server.bots[binding.bot_id]
    polls = bot.polls
    world.ilink.run(world.ilink.server.redeliver, binding.bot_id, message)
    world.ilink.run(world.ilink.server.redeliver, binding.bot_id, message)
    # Two polls after the replays: they were delivered and dropped.
    world.ilink.until(lambda s: s.bots[binding.bot_id].polls >= polls + 3)
    assert len(sent_texts(world, OWNER)) == before + 1


def test_minus_2_is_retried_with_the_same_client_id(world: World) -> None:
    binding = world.active(OWNER)
    world.model.script(Reply.answer("after a refusal"))
    before = len(world.ilink.server.sent)
    world.ilink.run(
        world.ilink.server.inject,
        "sendmessage",
        Response(body=json.dumps({"ret": -2, "errmsg": ""}).encode()),
    )
    say(world, binding.bot_id, OWNER, "try")
    world.ilink.until(lambda s: len(s.sent) == before + 1)
    sent = world.ilink.server.sent[-1]
    assert sent.text == "after a refusal"
    bodies = [
        json.loads(r.body)["msg"]["client_id"]
        for r in world.ilink.server.requests
        if r.path.endswith("/sendmessage")
    ]
    assert bodies[-2:] == [sent.client_id, sent.client_id]


def test_bad_answers_are_in_the_ledger_and_the_binding_keeps_working(world: World) -> None:
    binding = world.active(OWNER)
    server = world.ilink.server
    world.ilink.run(
        server.inject,
        "getupdates",
        Response(body=b"{not json"),
        Response(body=json.dumps({"ret": 0, "msgs": {"a": 1}}).encode()),
        Response(302, headers=(("location", "http://evil.example/"),)),
        Response(body=b"x" * (5 << 20)),
    )
    world.until(lambda: not server.faults.get("getupdates"))
    world.model.script(Reply.answer("still here"))
    before = len(sent_texts(world, OWNER))
    say(world, binding.bot_id, OWNER, "are you there?")
    world.ilink.until(lambda s: len(s.texts_to(OWNER)) == before + 1)
    notes = [line for line in world.history() if "receiving failed" in line]
    assert any("not JSON" in line for line in notes), notes


def test_minus_14_pauses_the_binding_until_a_new_scan(world: World) -> None:
    old = world.active(OWNER)
    world.ilink.run(world.ilink.server.revoke, old.bot_id)
    world.until(lambda: world.binding(old.bot_id).status == wpb.WECHAT_BINDING_STATUS_PAUSED)
    paused = world.binding(old.bot_id)
    assert "-14" in paused.detail
    assert "naga wechat bind" in paused.detail
    assert any(f"binding {old.bot_id} paused" in line for line in world.history())
    fresh = world.bind(OWNER)
    assert fresh.bot_id != old.bot_id
    assert [b.bot_id for b in world.client.wechat_bindings() if b.owner_user_id == OWNER] == [
        fresh.bot_id
    ]
    world.model.script(Reply.answer("back again"))
    say(world, fresh.bot_id, OWNER, "hello?")
    world.ilink.until(lambda s: "back again" in s.texts_to(OWNER))


def test_two_bindings_and_three_users_are_kept_apart(world: World) -> None:
    a = world.bind("alice@im.wechat")
    b = world.bind("bob@im.wechat")
    carol = "carol@im.wechat"
    world.model.script(
        Reply.answer("to alice"), Reply.answer("to carol via b"), Reply.answer("to bob")
    )
    say(world, a.bot_id, "alice@im.wechat", "secret of alice")
    world.ilink.until(lambda s: s.texts_to("alice@im.wechat"))
    say(world, b.bot_id, carol, "carol writes")
    world.ilink.until(lambda s: s.texts_to(carol))
    say(world, b.bot_id, "bob@im.wechat", "bob writes")
    world.ilink.until(lambda s: s.texts_to("bob@im.wechat"))
    sessions = {
        session_of(a.bot_id, "alice@im.wechat"),
        session_of(b.bot_id, carol),
        session_of(b.bot_id, "bob@im.wechat"),
    }
    assert len(sessions) == 3
    texts = {s: [e.text for e in world.client.session_history(s)] for s in sessions}
    assert texts[session_of(b.bot_id, carol)][0] == "carol writes"
    assert all(
        "secret of alice" not in t for s, ts in texts.items() for t in ts if "alice" not in s
    )

    # Carol is not bob's binding's owner: her turn ran untrusted (the agent's
    # ceiling for untrusted is R0 today: the R3 tool is not shown, R0 is).
    def tools_for(text: str) -> list[str]:
        for r in world.model.server.requests:
            body = r.json()
            if any(m.get("content") == text for m in body.get("messages", [])):
                return [t["function"]["name"] for t in body.get("tools", [])]
        raise AssertionError(f"no model request for {text!r}")

    assert "danger__wipe" not in tools_for("carol writes")
    assert "danger__echo" in tools_for("bob writes")
    assert "danger__wipe" in tools_for("bob writes")
    replies = {s.user: s for s in world.ilink.server.sent}
    assert replies[carol].bot_id == b.bot_id
    assert replies["alice@im.wechat"].bot_id == a.bot_id


@pytest.mark.slow
def test_the_cli_binds_lists_reports_and_unbinds(world: World) -> None:

    def naga(*args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "naga_core.cli", *args, "--home", world.home, "--json"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    proc = naga("wechat", "bind", stdin=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdin is not None
    first = json.loads(proc.stdout.readline())
    assert first["status"] == "wait"
    assert first["url"].startswith("https://")
    login = first["login_id"]
    world.ilink.run(world.ilink.server.scan, login)
    assert json.loads(proc.stdout.readline())["status"] == "scaned"
    world.ilink.run(world.ilink.server.ask_code, login, "731")
    assert json.loads(proc.stdout.readline())["status"] == "need_verifycode"
    proc.stdin.write("731\n")
    proc.stdin.flush()
    world.ilink.until(lambda s: "731" in s.qr(login).polls)
    bot = world.ilink.run(world.ilink.server.confirm, login, "cli@im.wechat")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    done = json.loads(out)
    assert done["bot_id"] == bot.bot_id
    assert done["binding"]["owner_user_id"] == "cli@im.wechat"

    listed = json.loads(naga("wechat", "list").communicate(timeout=60)[0])
    assert bot.bot_id in [b["bot_id"] for b in listed["bindings"]]
    status = naga("wechat", "status", bot.bot_id)
    shown = json.loads(status.communicate(timeout=60)[0])
    assert status.returncode == 0
    assert shown["bindings"][0]["status"] == "active"
    gone = naga("wechat", "unbind", bot.bot_id)
    assert json.loads(gone.communicate(timeout=60)[0])["seq"] > 0
    assert gone.returncode == 0
    assert bot.bot_id not in [b.bot_id for b in world.client.wechat_bindings()]
    missing = naga("wechat", "status", bot.bot_id)
    missing.communicate(timeout=60)
    assert missing.returncode == 1


def test_voice_uses_the_server_transcript_or_says_it_cannot_hear(world: World) -> None:
    binding = world.active(OWNER)
    server = world.ilink.server
    with_text = {"type": 3, "voice_item": {"text": "remind me at five", "playtime": 1200}}
    without = {"type": 3, "voice_item": {"playtime": 900, "encode_type": 6}}
    world.model.script(Reply.answer("noted"), Reply.answer("sorry"))
    before = len(sent_texts(world, OWNER))
    world.ilink.run(server.user_sends, binding.bot_id, OWNER, [with_text])
    world.ilink.until(lambda s: len(s.texts_to(OWNER)) == before + 1)
    world.ilink.run(server.user_sends, binding.bot_id, OWNER, [without])
    world.ilink.until(lambda s: len(s.texts_to(OWNER)) == before + 2)
    asked = [e.text for e in world.client.session_history(session_of(binding.bot_id, OWNER))]
    assert "[voice message, the server's transcript] remind me at five" in asked
    assert "[a voice message without a transcript: it cannot be heard here]" in asked


def _png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00"
    chunk = b"IHDR" + ihdr
    crc = struct.pack(">I", zlib.crc32(chunk))
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + crc + b"\x00" * 40


def test_media_in_both_key_forms_is_decrypted_checked_archived_and_described(
    world: World,
) -> None:
    binding = world.active(OWNER)
    server = world.ilink.server
    key = bytes(range(16))
    other = bytes(range(16, 32))
    png = _png(64, 48)
    raw = world.ilink.run(lambda: server.media_item(png, kind=2, key_form="raw", key=key))
    hexed = world.ilink.run(lambda: server.media_item(png, kind=2, key_form="hex", key=key))
    keyless = world.ilink.run(lambda: server.media_item(png, kind=2, key_form="none"))
    document = b"%PDF-1.4 a small document"
    file_item = world.ilink.run(
        lambda: server.media_item(
            document, kind=4, key_form="hex", key=key, file_name="a.pdf", len=str(len(document))
        )
    )
    wrong_key = world.ilink.run(lambda: server.media_item(png, kind=2, key_form="raw", key=key))
    wrong_key["image_item"]["media"]["aes_key"] = base64.b64encode(other).decode()
    cut = world.ilink.run(lambda: server.media_item(png, kind=2, key_form="raw", key=key))
    param = cut["image_item"]["media"]["encrypt_query_param"]
    world.ilink.run(lambda: server.media.__setitem__(param, server.media[param][:-3]))
    wrong_size = world.ilink.run(
        lambda: server.media_item(
            document, kind=4, key_form="raw", key=key, file_name="b.pdf", len=str(len(document) + 1)
        )
    )
    # A media URL on another port of the server's host, or another host: the
    # plugin's egress proxy refuses both (loopback listeners stand in).
    other_port = world.ilink.run(lambda: server.media_item(png, kind=2, key_form="raw", key=key))
    other_port["image_item"]["media"]["full_url"] = "http://127.0.0.1:9/x"
    other_host = world.ilink.run(lambda: server.media_item(png, kind=2, key_form="raw", key=key))
    other_host["image_item"]["media"]["full_url"] = f"http://localhost:{server.port}/c2c/x"
    cases = [raw, hexed, keyless, file_item, wrong_key, cut, wrong_size, other_port, other_host]
    world.model.script(*[Reply.answer(f"seen {i}") for i in range(len(cases))])
    before = len(sent_texts(world, OWNER))
    for item in cases:
        world.ilink.run(server.user_sends, binding.bot_id, OWNER, [item])
    world.ilink.until(lambda s: len(s.texts_to(OWNER)) >= before + len(cases))
    # The messages, as the model got them (each recorded when it arrived:
    # the core's lane queues them behind the running turn).
    history = world.client.session_history(session_of(binding.bot_id, OWNER))
    asked = [e.text for e in history if e.role == tpb.HISTORY_ROLE_USER][-len(cases) :]
    digest = hashlib.sha256(png).hexdigest()
    for text in asked[:3]:
        assert text.startswith(f"[an image: image/png, {len(png)} bytes, 64x48, sha256 {digest}")
        assert "cannot see" not in text  # said to the model by the core, per provider
    assert asked[3].startswith("[a file 'a.pdf': application/pdf")
    assert "bad PKCS#7 padding" in asked[4]
    assert "not whole AES blocks" in asked[5]
    assert "not the 26 declared" in asked[6]
    assert "(port_not_allowed)" in asked[7]
    assert "(host_not_allowed)" in asked[8]
    # Kept sealed under the owner's key (docs/adr/0037): the plaintext's
    # digest names nothing in the store, the blob it names opens to the image.
    home = Home(world.home)
    assert not blob_store(home).exists(bytes.fromhex(digest))
    kept = re.search(r"kept sealed in the blob store as ([0-9a-f]{64})", asked[0])
    assert kept is not None, asked[0]
    sealed = blob_store(home).get(bytes.fromhex(kept.group(1)))
    assert png not in sealed
    assert Sealer.reader(home).open_blob(sealed) == png
    notes = world.history()
    assert any("refused: bad PKCS#7 padding" in n for n in notes)


def test_what_wechat_does_not_carry_of_a_reply_is_a_note_in_its_session(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    binding = world.active(OWNER)
    server = world.ilink.server
    session = session_of(binding.bot_id, OWNER)

    def notes() -> list[str]:
        if session not in {s.session for s in world.client.sessions(1000)}:
            return []  # this test alone: the owner has not written yet
        capsys.readouterr()
        assert cli_main(["log", session, "--home", world.home, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["entries"]
        return [r["text"] for r in rows if r["role"] == "note"]

    had = len(notes())
    # Twelve parts: WeChat carries ten per message (the last one a note).
    long = "\n\n".join(f"part {i}: " + "x" * 1500 for i in range(12))
    assert len(chunks(long)) == 12
    world.model.script(Reply.answer(long))
    before = len(sent_texts(world, OWNER))
    say(world, binding.bot_id, OWNER, "tell me everything")
    world.ilink.until(lambda s: len(s.texts_to(OWNER)) >= before + 10)
    (cut,) = world.until(lambda: notes()[had:])
    assert cut.startswith("WeChat carries 10 messages per message it answers: the last 3 part(s)")

    # Every attempt at the next reply refused (-2): said in the session too.
    refusal = Response(body=json.dumps({"ret": -2, "errmsg": ""}).encode())
    world.ilink.run(server.inject, "sendmessage", *[refusal] * CHANNEL.send_attempts)
    world.model.script(Reply.answer("this will not arrive"))
    say(world, binding.bot_id, OWNER, "and now?")
    (lost,) = world.until(lambda: notes()[had + 1 :])
    peer = f"wechat:{binding.bot_id}/{OWNER}"
    assert lost.startswith(f"this reply was not delivered to {peer}: WeChat refused it (-2)")
    assert lost.endswith("; it stays in the session")
    assert "this will not arrive" not in sent_texts(world, OWNER)
    assert "this will not arrive" in [e.text for e in world.client.session_history(session)]
