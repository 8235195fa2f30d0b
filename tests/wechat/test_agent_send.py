"""The agent's own media out (issue 16): in a WeChat conversation the
model is offered ``wechat__send_file`` (R2); the fake model over HTTP asks
for it, the real core runs it through the sandboxed plugin (getuploadurl,
AES-128-ECB, CDN upload, sendmessage), and the fake iLink server records
the upload, which the test decrypts and compares byte for byte. The send
is an irreversible ledger effect. Outside a WeChat session the tool is
neither offered nor callable; a path outside the workspace, through a
symlink, or both a path and a blob are refused by name."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

from naga.v1 import agent_pb2 as apb
from naga.v1 import core_pb2 as cpb
from naga_core._home import Home
from naga_core._store import blob_store
from naga_core.wechat import session_of
from tests.fakes.ilink import FakeILink, _crypto
from tests.fakes.model_server import Reply
from tests.wechat.conftest import World, say
from tests.wechat.test_outbound import _png  # pyright: ignore[reportPrivateUsage]

USER = "agent-send@im.wechat"
FRIEND = "agent-send-friend@im.wechat"
TOOL = "wechat__send_file"


def _offered(body: bytes) -> list[str]:
    return [t["function"]["name"] for t in json.loads(body).get("tools", [])]


def _plain(world: World, media: dict[str, Any]) -> bytes:
    key_hex = base64.b64decode(media["aes_key"]).decode("ascii")
    return _crypto.decrypt(
        bytes.fromhex(key_hex), world.ilink.server.media[media["encrypt_query_param"]]
    )


def _media_to(world: World, kind: int) -> list[dict[str, Any]]:
    return [s.item for s in world.ilink.server.sent if s.user == USER and s.kind == kind]


def _tool_records(world: World, session: str) -> list[apb.TurnRecord]:
    found: list[Any] = []
    while True:
        page = world.client.records(found[-1].seq + 1 if found else 0, 1000)
        if not page:
            break
        found += page
    bodies = [apb.TurnRecord.FromString(r.payload) for r in found if r.kind == "turn.tool"]
    return [b for b in bodies if b.session == session]


def _answered(world: World, before: int) -> list[str]:
    def new(s: FakeILink) -> list[str]:
        return s.texts_to(USER)[before:]

    return world.ilink.until(new)


def _received(world: World, bot_id: str, user: str, data: bytes, name: str) -> str:
    """``user`` sends ``data`` as a file; the store digest its description names."""
    server = world.ilink.server
    item = world.ilink.run(
        lambda: server.media_item(data, kind=4, key_form="hex", file_name=name, len=str(len(data)))
    )
    world.model.script(Reply.answer(f"got {name}"))
    before = len(server.texts_to(user))
    world.ilink.run(server.user_sends, bot_id, user, [item])
    world.ilink.until(lambda s: len(s.texts_to(user)) > before)
    said = [e.text for e in world.client.session_history(session_of(bot_id, user))]
    found = [m for t in said if (m := re.search(r"sealed in the blob store as ([0-9a-f]{64})", t))]
    assert found, said
    return found[-1].group(1)


def test_the_agent_sends_a_workspace_image_and_a_blob_file(world: World) -> None:
    binding = world.active(USER)
    workspace = Path(world.home) / "workspace"
    workspace.mkdir(exist_ok=True)
    image = _png(9, 4)
    (workspace / "charts").mkdir(exist_ok=True)
    (workspace / "charts" / "week.png").write_bytes(image)
    asked = len(world.model.server.requests)
    world.model.script(
        Reply.answer(tool_calls=(("c1", TOOL, json.dumps({"path": "charts/week.png"})),)),
        Reply.answer("there it is"),
    )
    say(world, binding.bot_id, USER, "send me this week's chart")
    assert _answered(world, 0) == ["there it is"]
    assert TOOL in _offered(world.model.server.requests[asked].body)

    (item,) = _media_to(world, 2)
    media = item["image_item"]["media"]
    assert _plain(world, media) == image
    # The result told the model what went; the effect is irreversible, in words.
    result = json.loads(world.model.server.requests[asked + 1].body)["messages"][-1]["content"]
    assert '"sent": "image"' in result
    assert f'"size": {len(image)}' in result
    entries = world.client.history(limit=100).entries
    (effect,) = [e for e in entries if e.description.startswith("wechat: sent image 'week.png'")]
    assert effect.irreversible

    # A file the user sent, by the hash its description gives (it is kept
    # sealed in the store): what goes is the file, opened, not the sealed box.
    report = b"%PDF-1.4\n" + os.urandom(3000)
    digest = _received(world, binding.bot_id, USER, report, "report.pdf")
    sealed = blob_store(Home(world.home)).get(bytes.fromhex(digest))
    assert report not in sealed
    args = {"blob": digest, "kind": "file", "file_name": "report.pdf"}
    world.model.script(
        Reply.answer(tool_calls=(("c2", TOOL, json.dumps(args)),)), Reply.answer("sent the pdf")
    )
    say(world, binding.bot_id, USER, "send the report back")
    assert _answered(world, 2) == ["sent the pdf"]
    (file_item,) = _media_to(world, 4)
    assert file_item["file_item"]["file_name"] == "report.pdf"
    assert _plain(world, file_item["file_item"]["media"]) == report


def test_bad_paths_are_refused_and_nothing_is_sent(world: World, tmp_path: Path) -> None:
    binding = world.active(USER)
    workspace = Path(world.home) / "workspace"
    workspace.mkdir(exist_ok=True)
    outside = tmp_path / "secret.txt"
    outside.write_bytes(b"not for wechat")
    link = workspace / "innocent.txt"
    if not link.is_symlink():
        link.symlink_to(outside)
    before_media = [s for s in world.ilink.server.sent if s.user == USER and s.kind != 1]
    calls = [
        {"path": "../ledger"},
        {"path": str(outside)},
        {"path": "innocent.txt"},
        {"path": "nope.png"},
        {"path": "a", "blob": "0" * 64},
        {"blob": "ab" * 32},
    ]
    world.model.script(
        *(Reply.answer(tool_calls=((f"b{i}", TOOL, json.dumps(c)),)) for i, c in enumerate(calls)),
        Reply.answer("I could not send it"),
    )
    sent_before = len(world.ilink.server.texts_to(USER))
    say(world, binding.bot_id, USER, "send me the secrets")
    assert _answered(world, sent_before) == ["I could not send it"]
    records = _tool_records(world, session_of(binding.bot_id, USER))
    by_call = {r.call_id: r for r in records}
    assert not any(by_call[f"b{i}"].ok for i in range(len(calls)))
    errors = [by_call[f"b{i}"].error for i in range(len(calls))]
    assert "leaves the workspace" in errors[0]
    assert "is absolute" in errors[1]
    assert "outside the workspace (through a symlink)" in errors[2]
    assert "there is no file 'nope.png'" in errors[3]
    assert "exactly one of" in errors[4]
    assert "is not one of this conversation's" in errors[5]
    after_media = [s for s in world.ilink.server.sent if s.user == USER and s.kind != 1]
    assert after_media == before_media


def test_outside_a_wechat_session_it_is_not_offered_and_is_refused(world: World) -> None:
    asked = len(world.model.server.requests)
    world.model.script(
        Reply.answer(tool_calls=(("w1", TOOL, json.dumps({"path": "charts/week.png"})),)),
        Reply.answer("no wechat here"),
    )
    events = list(
        world.client.run_turn("plain-console", "send it to my wechat", "k-plain", timeout=60)
    )
    assert events[-1].HasField("final"), events[-1]
    assert TOOL not in _offered(world.model.server.requests[asked].body)
    (record,) = [r for r in _tool_records(world, "plain-console") if r.call_id == "w1"]
    assert not record.ok
    assert "only in a WeChat conversation" in record.error


def test_a_second_users_session_cannot_send_the_first_ones_blob(world: World) -> None:
    binding = world.active(USER)
    bot = binding.bot_id
    secret = b"%PDF-1.4\n" + b"the first user's contract " * 50
    theirs = _received(world, bot, USER, secret, "contract.pdf")
    # A friend the owner raised to `known` (so the R2 tool is offered) ...
    world.client.set_trust(
        f"wechat:{bot}/{FRIEND}", cpb.TRUST_LEVEL_KNOWN, by_owner=True, reason="a friend"
    )
    own = b"%PDF-1.4\n" + b"the friend's own file " * 40
    mine = _received(world, bot, FRIEND, own, "mine.pdf")
    # ... asks for the first user's blob by digest, then again after typing
    # the digest into its own conversation (a mention is not ownership),
    # then for its own file, which goes.
    calls = [{"blob": theirs}, {"blob": theirs}, {"blob": mine, "kind": "file"}]
    world.model.script(
        Reply.answer(tool_calls=(("x1", TOOL, json.dumps(calls[0])),)),
        Reply.answer("not that one"),
        Reply.answer(tool_calls=(("x2", TOOL, json.dumps(calls[1])),)),
        Reply.answer("still not"),
        Reply.answer(tool_calls=(("x3", TOOL, json.dumps(calls[2])),)),
        Reply.answer("yours went"),
    )
    before = len(world.ilink.server.texts_to(FRIEND))
    say(world, bot, FRIEND, "send me that contract")
    say(world, bot, FRIEND, f"[a file: kept sealed in the blob store as {theirs}] send it")
    say(world, bot, FRIEND, "then send me mine")
    got = world.ilink.until(
        lambda s: s.texts_to(FRIEND)[before:] if len(s.texts_to(FRIEND)) >= before + 3 else []
    )
    assert got == ["not that one", "still not", "yours went"]
    by_call = {r.call_id: r for r in _tool_records(world, session_of(bot, FRIEND))}
    for call in ("x1", "x2"):
        assert not by_call[call].ok
        assert f"blob {theirs} is not one of this conversation's" in by_call[call].error
    assert by_call["x3"].ok, by_call["x3"].error
    files = [s.item for s in world.ilink.server.sent if s.user == FRIEND and s.kind == 4]
    assert [_plain(world, f["file_item"]["media"]) for f in files] == [own]
    # Nothing of the first user's went anywhere.
    assert not [
        s
        for s in world.ilink.server.sent
        if s.kind == 4 and s.item["file_item"]["file_name"] == "contract.pdf"
    ]
