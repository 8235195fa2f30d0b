"""The canary test of memory (issue 18), through real turns of two
subjects (the owner, and a known WebChat peer) on the real core, its
executor and provider plugin, and the real CLI:

* each subject's memories hold a planted canary; every byte under
  ``$NAGA_HOME`` is searched for each canary in plain, base64 and hex;
  memory's own records (``memory.*``) and the key files hold none;
* the turns' own records (messages, replies, tool calls), their
  projection rows, the model requests and answers and the start-up
  snapshot are sealed under the subjects' keys (docs/adr/0037): 0 hits
  anywhere under the home outside the owner's workspace, each hit located
  (ledger record, projection row, blob, file) so a failure says where;
* after ``naga memory forget`` of one subject: its items no longer decrypt
  (``show`` says forgotten), recall no longer offers them (the next
  prompt lacks them), ``naga log`` of its session says forgotten where its
  words were, the other subject's still work, after a restart of the core
  too; the forget is an irreversible effect in a rollback's dry run,
  ``naga ledger verify`` passes on the stopped home, and no key on disk
  opens the forgotten subject's old records or blobs;
* with the skills' review on (its default), each subject's first turn is
  reviewed and the fake model's review distils a skill quoting the
  subject's canary (in its name, description and body) into the subject's
  scope: sealed under its key (docs/adr/0060), named in kernel state by a
  keyed id, so the whole-home search finds it nowhere; after the forget
  the peer's skill lists as forgotten, its objects open with no key on
  disk, and the owner's still reads.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from naga.v1 import agent_pb2 as apb
from naga.v1 import skills_pb2 as skpb
from naga_core._home import Home
from naga_core._store import blob_store, open_ledger, projection_path
from naga_core.agent import AgentConfig
from naga_core.cli import main
from naga_core.memory import FORGOTTEN, Sealer, subject_key_path
from naga_core.plugins import PluginsConfig
from naga_core.skills import TURN_KIND
from tests.agent.conftest import PLUGINS, TUNING, ServerThread, final, write_providers
from tests.canary_helpers import holds
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import READY_S

AGENT = AgentConfig(executors=1, turn_timeout_s=60).with_budgets(100_000)
PEER = "webchat:canary-peer"
OWNER_CANARY = "zq7owner" + uuid.uuid4().hex[:10]
PEER_CANARY = "zq7peer" + uuid.uuid4().hex[:10]


def _naga(capsys: pytest.CaptureFixture[str], home: str, *argv: str) -> tuple[int, Any]:
    capsys.readouterr()
    code = main([*argv, "--home", home, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def _write(text: str) -> Reply:
    return Reply.answer("", tool_calls=(("w1", "memory__write", json.dumps({"text": text})),))


def _turn(c: Any, session: str, text: str, peer: str = "") -> Any:
    return final(list(c.run_turn(session, text, uuid.uuid4().hex, peer=peer, timeout=READY_S * 2)))


def _skill_name(canary: str) -> str:
    return f"{canary}-recall"


def _review(canary: str, said: str) -> Reply:
    """The review's answer: a skill quoting the subject's canary everywhere."""
    proposal = {
        "action": "create",
        "name": _skill_name(canary),
        "description": f"Recall {canary}. Use when the person asks about {canary}.",
        "body": f"1. Answer with `{canary}`.\n",
        "evidence": [said],
        "reason": f"the turn saved {canary}",
    }
    return Reply.answer(tool_calls=(("r1", "skill_review", json.dumps(proposal)),))


def _reviewed_turn(c: Any, session: str, text: str, peer: str = "") -> None:
    """A turn, then its skill.turn record (written after the reply, once
    the review is done): the next turn's script is not the review's."""
    events = c.subscribe(c.head().size, kinds=[TURN_KIND], timeout=READY_S * 2)
    try:
        _turn(c, session, text, peer)
        for event in events:
            if event.HasField("record"):
                turn = skpb.SkillTurn.FromString(event.record.payload)
                if turn.session == session:
                    assert turn.review == "created", turn
                    assert not turn.detail, turn  # sealed under the subject
                    return
    finally:
        events.cancel()
    raise AssertionError(f"no skill.turn record for {session}")


def _skills(capsys: pytest.CaptureFixture[str], home: str) -> dict[str, dict[str, Any]]:
    code, listed = _naga(capsys, home, "skill", "list", "--all")
    assert code == 0, listed
    return {s["scope"]: s for s in listed["skills"]}


def _locate(home: Home, canary: str) -> set[str]:
    """Every place under the home holding ``canary`` in any form; each hit
    explained as ledger:<kind>, projection:<kind>, blob:<referencing kinds>,
    or file:<path> when nothing explains it."""
    places: set[str] = set()
    blob_kinds: dict[str, set[str]] = {}
    record_kinds: set[str] = set()
    with open_ledger(home, create=False) as ledger:
        for r in ledger.iter_records():
            if holds(r.payload, canary):
                record_kinds.add(r.kind)
                places.add(f"ledger:{r.kind}")
            for digest in r.blob_refs:
                blob_kinds.setdefault(digest.hex(), set()).add(r.kind)
    db = sqlite3.connect(f"file:{projection_path(home)}?mode=ro", uri=True)
    try:
        for kind, payload in db.execute("SELECT kind, payload FROM records"):
            if holds(bytes(payload), canary):
                places.add(f"projection:{kind}")
    finally:
        db.close()
    for d, _dirs, files in os.walk(home.root):
        for name in files:
            path = os.path.join(d, name)
            rel = os.path.relpath(path, home.root)
            if os.path.islink(path) or rel.startswith("workspace"):
                continue
            with open(path, "rb") as f:
                data = f.read()
            if not holds(data, canary):
                continue
            if rel.startswith("ledger/") and rel.endswith(".log") and record_kinds:
                continue  # a segment: explained by the records found above
            if rel == os.path.relpath(projection_path(home), home.root):
                continue  # explained row by row above
            if rel.startswith("ledger/snapshots/start-") and rel.endswith(".snap"):
                places.add("snapshot:start-snapshot")
                continue
            if rel.startswith("blobs/"):
                kinds = next((k for h, k in blob_kinds.items() if h in name), None)
                places.add(f"blob:{','.join(sorted(kinds))}" if kinds else f"file:{rel}")
                continue
            places.add(f"file:{rel}")
    return places


def _forgotten_log(capsys: pytest.CaptureFixture[str], home: str) -> None:
    """``naga log``: the forgotten peer's first session says forgotten where
    its words were (never an empty text), the owner's still reads."""
    code, peer_log = _naga(capsys, home, "log", "canary-peer-1")
    assert code == 0
    texts = [e["text"] for e in peer_log["entries"] if e["role"] in ("user", "assistant")]
    assert texts, peer_log
    assert all(t == FORGOTTEN for t in texts), peer_log
    tools = [e for e in peer_log["entries"] if e["role"] == "tool"]
    assert tools, peer_log
    assert all(FORGOTTEN in e["arguments"] for e in tools), tools
    code, owner_log = _naga(capsys, home, "log", "canary-owner-1")
    assert any(OWNER_CANARY in e["text"] for e in owner_log["entries"]), owner_log
    # The session list's previews too (both sessions were just read back).
    code, listed = _naga(capsys, home, "session", "list")
    previews = {s["session"]: s["preview"] for s in listed["sessions"]}
    assert previews["canary-peer-1"] == FORGOTTEN[:80], previews
    assert OWNER_CANARY in previews["canary-owner-1"], previews


def _skills_after_forget(capsys: pytest.CaptureFixture[str], home: str, version: str) -> None:
    """The forgotten peer's skill lists as forgotten (never an error, never
    blank); the owner's still reads, by name too."""
    skills = _skills(capsys, home)
    gone = skills[f"peer/{PEER}"]
    assert (gone["name"], gone["description"], gone["version"]) == (FORGOTTEN, FORGOTTEN, version)
    assert skills["session/canary-owner-1"]["name"] == _skill_name(OWNER_CANARY)
    code, shown = _naga(capsys, home, "skill", "show", _skill_name(OWNER_CANARY))
    assert code == 0, shown
    code, missing = _naga(capsys, home, "skill", "show", _skill_name(PEER_CANARY))
    assert code != 0, missing


def _no_key_opens(h: Home) -> None:
    """Every turn record holding text is sealed; the forgotten peer's first
    session's records and blobs open with no key on disk (its new key, made
    by its turns after the forget, has another id); the owner's open."""
    sealer = Sealer.reader(h)
    with open_ledger(h, create=False) as ledger:
        records = list(ledger.iter_records())
    blobs = blob_store(h)
    old_peer: list[apb.TurnRecord] = []
    for r in records:
        if not r.kind.startswith("turn."):
            continue
        body = apb.TurnRecord.FromString(r.payload)
        assert not body.text, (r.kind, body)
        assert not body.arguments_json, (r.kind, body)
        assert not body.result_json, (r.kind, body)
        opened = sealer.open_turn(r.kind, body)
        if body.session == "canary-peer-1":
            if body.HasField("sealed"):
                old_peer.append(body)
            assert opened.forgotten or not body.HasField("sealed"), (r.kind, opened)
            for digest in r.blob_refs:
                assert sealer.open_blob(blobs.get(digest)) is None
        elif body.session.startswith("canary-owner") and body.HasField("sealed"):
            assert not opened.forgotten, (r.kind, opened)
            assert opened.text or opened.arguments_json or opened.error_message, opened
    assert old_peer, "the peer's first session sealed nothing"
    assert {b.sealed.subject for b in old_peer} == {PEER}
    new_key = sealer.key_id(PEER)
    assert new_key is not None
    assert new_key not in {b.sealed.kek_id for b in old_peer}
    assert sorted(os.listdir(Path(h.keys_dir, "memory"))) == sorted(
        os.path.basename(subject_key_path(h, s)) for s in ("webchat:owner", PEER)
    )


def test_canaries_forget_and_verify(
    model_server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    server = model_server.server
    root = tempfile.mkdtemp(prefix="naga-canary-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, server.openai_url)
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=TUNING)
    try:
        with core_in_thread(home, plugins=config, agent=AGENT) as core:
            with core.client() as c:
                c.set_trust(PEER, "known", by_owner=True, reason="canary test")
                # One tool call is enough for a review here (its default is on).
                c.set_setting("skills.review_min_tools", 1)
                said = f"My locker code word is {OWNER_CANARY}"
                model_server.script(
                    _write(f"The owner's locker code word is {OWNER_CANARY}"),
                    Reply.answer("Ok."),
                    _review(OWNER_CANARY, said),
                )
                _reviewed_turn(c, "canary-owner-1", f"{said}.")
                said = f"My bike is named {PEER_CANARY}"
                model_server.script(
                    _write(f"The peer's bike is named {PEER_CANARY}"),
                    Reply.answer("Ok."),
                    _review(PEER_CANARY, said),
                )
                _reviewed_turn(c, "canary-peer-1", f"{said}.", peer=PEER)
                skills = _skills(capsys, home)
                owner_skill = skills["session/canary-owner-1"]
                peer_skill = skills[f"peer/{PEER}"]
                assert owner_skill["name"] == _skill_name(OWNER_CANARY)
                assert peer_skill["name"] == _skill_name(PEER_CANARY)
                assert PEER_CANARY in peer_skill["description"]

                code, listed = _naga(capsys, home, "memory", "list")
                assert code == 0
                texts = {i["subject"]: i["text"] for i in listed["items"]}
                assert texts == {
                    "webchat:owner": f"The owner's locker code word is {OWNER_CANARY}",
                    PEER: f"The peer's bike is named {PEER_CANARY}",
                }
                code, found = _naga(capsys, home, "memory", "search", "bike", "--subject", PEER)
                assert [i["text"] for i in found["items"]] == [texts[PEER]]
                code, exported = _naga(capsys, home, "memory", "export", "--subject", PEER)
                assert [i["text"] for i in exported["items"]] == [texts[PEER]]
                peer_item = found["items"][0]["id"]
                before = c.head().size - 1
                code, peer_log = _naga(capsys, home, "log", "canary-peer-1")
                assert code == 0
                assert any(PEER_CANARY in e["text"] for e in peer_log["entries"]), peer_log

                code, forgot = _naga(capsys, home, "memory", "forget", PEER)
                assert (code, forgot["items"]) == (0, 1)
                _skills_after_forget(capsys, home, peer_skill["version"])
                code, shown = _naga(capsys, home, "memory", "show", peer_item)
                assert shown["item"]["forgotten"] is True
                assert shown["item"]["text"] is None
                # The forget is irreversible, and a rollback's dry run says so.
                code, preview = _naga(capsys, home, "rollback", "--to", str(before), "--dry-run")
                assert code == 0
                code, history = _naga(capsys, home, "history", "--limit", "20")
                (gone,) = [
                    e
                    for e in history["entries"]
                    if "the key of webchat:canary-peer destroyed" in e["description"]
                ]
                assert gone["irreversible"] is True
                assert gone["seq"] in preview["irreversible_seqs"], preview
                # Recall no longer offers the peer's memory; the owner's still works.
                first = len(server.requests)
                model_server.script(Reply.answer("I do not know."))
                _turn(c, "canary-peer-2", "What is my bike named?", peer=PEER)
                assert PEER_CANARY not in json.dumps(server.requests[first].json()["messages"][0])
                _forgotten_log(capsys, home)
                # Its first session cannot be replayed: its boxes' keys are gone.
                bundle = os.path.join(root, "peer.bundle")
                code, _ = _naga(capsys, home, "replay", "export", "canary-peer-1", "-o", bundle)
                assert code == 0
                code, ran = _naga(capsys, home, "replay", "run", bundle)
                assert code == 1
                assert "this session cannot be replayed" in ran["error"], ran
                first = len(server.requests)
                model_server.script(Reply.answer("It is in your memory."))
                _turn(c, "canary-owner-2", "What is my locker code word?")
                assert OWNER_CANARY in server.requests[first].json()["messages"][0]["content"]
                c.shutdown("canary test done")
            assert not core.join().failed
        # Saved means saved: after a restart the owner's memory is recalled
        # again (the index rebuilt from the ledger), the peer's stays gone.
        with core_in_thread(home, plugins=config, agent=AGENT) as again:
            with again.client() as c:
                first = len(server.requests)
                model_server.script(Reply.answer("Still remembered."), Reply.answer("No."))
                _turn(c, "canary-owner-3", "Remind me of my locker code word?")
                _turn(c, "canary-peer-3", "Remind me what my bike is named?", peer=PEER)
                owner_prompt = server.requests[first].json()["messages"][0]["content"]
                peer_prompt = server.requests[first + 1].json()["messages"][0]["content"]
                assert OWNER_CANARY in owner_prompt
                assert PEER_CANARY not in peer_prompt
                code, shown = _naga(capsys, home, "memory", "show", peer_item)
                assert shown["item"]["forgotten"] is True
                _forgotten_log(capsys, home)
                _skills_after_forget(capsys, home, peer_skill["version"])
                c.shutdown("canary test done")
            assert not again.join().failed
        verify_home(home)
        code, verified = _naga(capsys, home, "ledger", "verify")
        assert code == 0, verified

        h = Home(home)
        for canary in (OWNER_CANARY, PEER_CANARY):
            places = _locate(h, canary)
            assert places == set(), (canary, sorted(places))
        _no_key_opens(h)
        # The peer's skill: no key on disk opens any of its objects.
        sealed = blob_store(h).get(bytes.fromhex(peer_skill["version"]))
        assert Sealer.reader(h).open_blob(sealed) is None
        owned = blob_store(h).get(bytes.fromhex(owner_skill["version"]))
        assert Sealer.reader(h).open_blob(owned) is not None
    finally:
        shutil.rmtree(root, ignore_errors=True)
