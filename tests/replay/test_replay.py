"""Export a session recorded through the real core, replay it with the
executor's loop, and edit or break the bundle: each fault is named where it
is."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import replay_pb2 as rpb
from naga.v1.sealed_pb2 import SealedBox
from naga_core.cli import main as cli_main
from naga_core.ledger import CheckpointSigner, Entry
from naga_core.ledger._record import decode_body, encode_body
from naga_core.memory import BLOB_MAGIC, is_sealed_blob, open_blob_with, open_turn_with
from naga_core.replay import ReplayError, decode_bundle, encode_bundle, read_bundle, replay
from tests.replay.conftest import FAILING, SESSION, Recorded


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = cli_main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def bundle_bytes(recorded: Recorded, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("bundle") / "s.bundle"
    # Pinned where the online export was: the stop appends the ended
    # workers' token revocations after it.
    at = str(recorded.size_at_stop)
    code = cli_main(
        ["replay", "export", SESSION, "-o", str(out), "--home", recorded.home, "--at", at]
    )
    assert code == 0
    return out.read_bytes()


def _run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, *flags: str
) -> tuple[int, Any]:
    path = tmp_path / "b.bundle"
    path.write_bytes(data)
    return _cli(capsys, "replay", "run", str(path), *flags)


def test_export_through_the_running_core_reproduces(
    recorded: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert recorded.online["code"] == 0, recorded.online
    assert recorded.online["via"] == "core"
    code, data = _run(tmp_path, capsys, recorded.online_bundle)
    assert code == 0, data
    assert data["reproduced"] == 3
    assert data["divergence"] is None


def test_online_and_offline_exports_of_one_state_are_the_same_bundle(
    recorded: Recorded, bundle_bytes: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    online = decode_bundle(recorded.online_bundle)
    offline = decode_bundle(bundle_bytes)
    # Both name one ledger state: the one the online export pinned.
    assert online.tree_size == offline.tree_size == recorded.size_at_stop
    assert online.exported_ns <= offline.exported_ns
    online.exported_ns = offline.exported_ns = 0
    assert online == offline
    assert encode_bundle(online) == encode_bundle(offline)


def test_exporting_an_unknown_session_is_named(
    recorded: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert recorded.online_unknown["code"] == 1
    assert "no trace of session 's-never'" in str(recorded.online_unknown["error"])
    out = tmp_path / "never.bundle"
    code, data = _cli(
        capsys, "replay", "export", "s-never", "-o", str(out), "--home", recorded.home
    )
    assert code == 1
    assert "no trace of session 's-never'" in data["error"]
    assert not out.exists()


def test_the_recorded_session_reproduces_exactly(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    msg = decode_bundle(bundle_bytes)
    kinds = [r.kind for r in msg.records]
    assert kinds.count("turn.message") == 3
    assert kinds.count("turn.tool") == 4
    assert all(
        apb.TurnRecord.FromString(decode_body(r.body).payload).session == SESSION
        for r in msg.records
    )
    code, data = _run(tmp_path, capsys, bundle_bytes)
    assert code == 0, data
    assert data["reproduced"] == 3
    assert data["divergence"] is None
    turns: list[dict[str, Any]] = data["turns"]
    assert [(t["model_calls"], t["tool_calls"]) for t in turns] == [(2, 1), (3, 3), (1, 0)]
    cli_main(["replay", "run", str(tmp_path / "b.bundle")])
    assert "3 turns reproduced exactly" in capsys.readouterr().out


def _rewrite(
    msg: rpb.ReplayBundle, index: int, record: apb.TurnRecord, refs: tuple[bytes, ...] | None = None
) -> None:
    """Re-encode record ``index`` with a new payload (leaf hash unchanged)."""
    old = decode_body(msg.records[index].body)
    entry = Entry.of(old.kind, record.SerializeToString(), old.blob_refs if refs is None else refs)
    msg.records[index].body = encode_body(entry, old.seq, old.timestamp_ns, old.prev_hash)


def _opened_blob(msg: rpb.ReplayBundle, data: bytes) -> bytes:
    """A bundle's blob as its records name it: sealed (its subject's words,
    docs/adr/0037), opened with the data key the bundle carries."""
    assert is_sealed_blob(data)
    box = SealedBox.FromString(data[len(BLOB_MAGIC) :])
    (dek,) = [k.data_key for k in msg.keys if k.wrapped_key == box.wrapped_key]
    opened = open_blob_with(data, dek)
    assert opened is not None
    return opened


def _opened_record(msg: rpb.ReplayBundle, kind: str, payload: bytes) -> apb.TurnRecord:
    body = apb.TurnRecord.FromString(payload)
    assert body.HasField("sealed")
    assert not body.text
    (dek,) = [k.data_key for k in msg.keys if k.wrapped_key == body.sealed.wrapped_key]
    return open_turn_with(kind, body, dek)


def _model_records(msg: rpb.ReplayBundle) -> list[tuple[int, apb.TurnRecord]]:
    return [
        (i, apb.TurnRecord.FromString(decode_body(r.body).payload))
        for i, r in enumerate(msg.records)
        if r.kind == "turn.model"
    ]


def test_a_changed_model_answer_is_tampering_then_a_divergence(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    msg = decode_bundle(bundle_bytes)
    # Turn 2's first answer now asks to echo "z" instead of "a".
    index, model = _model_records(msg)[2]
    blobs = {b.digest: b for b in msg.blobs}
    answer = mpb.ChatResponse.FromString(_opened_blob(msg, blobs[model.response_blob].data))
    assert json.loads(answer.message.tool_calls[0].arguments_json) == {"text": "a"}
    answer.message.tool_calls[0].arguments_json = json.dumps({"text": "z"})

    data = answer.SerializeToString()
    digest = hashlib.sha256(data).digest()
    msg.blobs.append(rpb.BundleBlob(digest=digest, data=data))
    model.response_blob = digest
    _rewrite(msg, index, model, (model.request_blob, digest))
    edited = encode_bundle(msg)

    code, data_ = _run(tmp_path, capsys, edited)
    assert code == 1
    seq = msg.records[index].seq
    assert f"record {seq} (turn.model) does not match its leaf hash" in str(data_["error"])

    code, out = _run(tmp_path, capsys, edited, "--allow-edited")
    assert code == 1
    assert out["reproduced"] == 1
    assert out["edited_records"] == [seq]
    d: dict[str, Any] = out["divergence"]
    assert (d["turn"], d["step"]) == (2, 2)
    assert "tool call 1" in d["what"]
    assert '{"text": "a"}' in d["expected"]
    assert '{"text": "z"}' in d["got"]


def test_a_dropped_tool_result_is_the_divergence(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    msg = decode_bundle(bundle_bytes)
    tools = [i for i, r in enumerate(msg.records) if r.kind == "turn.tool"]
    del msg.records[tools[2]]  # turn 2's second tool call (call_3)
    code, out = _run(tmp_path, capsys, encode_bundle(msg))
    assert code == 1
    d: dict[str, Any] = out["divergence"]
    assert (d["turn"], d["step"]) == (2, 3)
    assert d["what"] == "a tool call that was not recorded here"
    assert '"b"' in d["got"]
    assert d["expected"] == "a model call"


def test_a_changed_request_shows_a_diff(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    msg = decode_bundle(bundle_bytes)
    index, model = _model_records(msg)[1]  # turn 1's second call
    blobs = {b.digest: b for b in msg.blobs}
    request = mpb.ChatRequest.FromString(_opened_blob(msg, blobs[model.request_blob].data))
    request.messages[-1].content = '{"echo": "pong"}'

    data = request.SerializeToString()
    digest = hashlib.sha256(data).digest()
    msg.blobs.append(rpb.BundleBlob(digest=digest, data=data))
    model.request_blob = digest
    _rewrite(msg, index, model, (digest, model.response_blob))
    code, out = _run(tmp_path, capsys, encode_bundle(msg), "--allow-edited")
    assert code == 1
    d: dict[str, Any] = out["divergence"]
    assert (d["turn"], d["step"]) == (1, 3)
    assert "model call 2: the request differs" in d["what"]
    diff = "\n".join(str(line) for line in d["diff"])
    assert "pong" in diff
    assert "ping" in diff
    cli_main(["replay", "run", str(tmp_path / "b.bundle"), "--allow-edited"])
    text = capsys.readouterr().out
    assert "DIVERGED at turn 1" in text
    assert "step 3" in text


def test_a_flipped_blob_byte_fails_its_checksum(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    msg = decode_bundle(bundle_bytes)
    blob = msg.blobs[1]
    blob.data = bytes([blob.data[0] ^ 1]) + blob.data[1:]
    users = [r.seq for r in msg.records if blob.digest in decode_body(r.body).blob_refs]
    code, out = _run(tmp_path, capsys, encode_bundle(msg))
    assert code == 1
    assert f"(named by record {users[0]}) fails its checksum" in str(out["error"])


def test_a_missing_blob_is_named(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    msg = decode_bundle(bundle_bytes)
    gone = msg.blobs[0].digest
    del msg.blobs[0]
    code, out = _run(tmp_path, capsys, encode_bundle(msg))
    assert code == 1
    assert f"names blob {gone.hex()[:16]}…, which the bundle lacks" in str(out["error"])


def test_a_flipped_byte_anywhere_fails_the_file_checksum(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = len(bundle_bytes) // 2
    data = bundle_bytes[:at] + bytes([bundle_bytes[at] ^ 0x40]) + bundle_bytes[at + 1 :]
    code, out = _run(tmp_path, capsys, data)
    assert code == 1
    assert out["error"] == "the bundle's body does not match its SHA-256: corrupted or edited"


_BAD: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "empty": (lambda b: b"", "the file is empty: not a replay bundle"),
    "truncated": (lambda b: b[: len(b) // 2], "the bundle is truncated: its header promises"),
    "cut-header": (
        lambda b: b[:20],
        "the bundle is truncated: 20 bytes, shorter than its 52-byte header",
    ),
    "wrong-version": (
        lambda b: b[:8] + (7).to_bytes(4, "big") + b[12:],
        "bundle format 7 is not supported: this naga reads format 1",
    ),
    "not-a-bundle": (lambda b: b"hello, I am a text file\n" * 4, "not a replay bundle"),
    "trailing": (lambda b: b + b"x", "the bundle has 1 bytes after the"),
}


@pytest.mark.parametrize("case", sorted(_BAD))
def test_bad_files_get_specific_errors(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    make, expected = _BAD[case]
    code, out = _run(tmp_path, capsys, make(bundle_bytes))
    assert code == 1
    assert expected in out["error"]
    assert out["ok"] is False


def test_a_missing_file_and_an_unknown_session(
    recorded: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _cli(capsys, "replay", "run", str(tmp_path / "nope.bundle"))
    assert code == 1
    assert "cannot read bundle" in str(out["error"])
    out_path = str(tmp_path / "x.bundle")
    code, out = _cli(capsys, "replay", "export", "s-none", "-o", out_path, "--home", recorded.home)
    assert code == 1
    assert out["error"] == "the ledger has no trace of session 's-none'"


def test_turns_ending_in_model_and_budget_errors_reproduce(
    recorded: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "f.bundle")
    code, data = _cli(capsys, "replay", "export", FAILING, "-o", out, "--home", recorded.home)
    assert code == 0, data
    assert data["turns"] == 2
    code, data = _cli(capsys, "replay", "run", out)
    assert code == 0, data
    assert data["reproduced"] == 2
    turns: list[dict[str, Any]] = data["turns"]
    # Calls answered from records; the budget's refusal (no record) is
    # checked through the outcome's model_calls, 2.
    assert [(t["model_calls"], t["tool_calls"]) for t in turns] == [(1, 0), (1, 1)]


def test_a_checkpoint_by_another_key_does_not_verify(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    msg = decode_bundle(bundle_bytes)
    other = CheckpointSigner.generate("other-naga")
    msg.vkey = other.verifier().vkey()
    code, out = _run(tmp_path, capsys, encode_bundle(msg))
    assert code == 1
    assert out["error"].startswith("the bundle's checkpoint does not verify: note has no signature")


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(1, 255)), min_size=1, max_size=4))
def test_any_damage_to_the_body_is_a_replay_error_never_a_crash(
    bundle_bytes: bytes, flips: list[tuple[int, int]]
) -> None:
    body = bytearray(bundle_bytes[52:])
    for at, mask in flips:
        body[at % len(body)] ^= mask
    # A fresh header, so the damage reaches the checks past the checksum.
    framed = bundle_bytes[:20] + hashlib.sha256(bytes(body)).digest() + bytes(body)
    with contextlib.suppress(ReplayError):
        replay(read_bundle(framed, allow_edited=True))


def test_an_edited_user_message_is_caught_at_step_one(
    bundle_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    msg = decode_bundle(bundle_bytes)
    index = [i for i, r in enumerate(msg.records) if r.kind == "turn.message"][1]
    # An editor holding the bundle holds its data keys: it writes the
    # message opened, in the clear (sealing it again would change nothing).
    message = _opened_record(msg, "turn.message", decode_body(msg.records[index].body).payload)
    assert message.text == "echo a, b, then c"
    message.text = "echo x, y, then z"
    _rewrite(msg, index, message)
    code, out = _run(tmp_path, capsys, encode_bundle(msg), "--allow-edited")
    assert code == 1
    d: dict[str, Any] = out["divergence"]
    assert (d["turn"], d["step"]) == (2, 1)
    assert d["expected"] == "'echo x, y, then z'"
    assert d["got"] == "'echo a, b, then c'"


def test_an_export_pinned_past_the_ledger_is_refused(
    recorded: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "far.bundle"
    far = str(recorded.size_at_stop + 10_000)
    code, data = _cli(
        capsys, "replay", "export", SESSION, "-o", str(out), "--home", recorded.home, "--at", far
    )
    assert code == 1
    assert f"--at {far}: the ledger holds" in data["error"]
    assert not out.exists()
