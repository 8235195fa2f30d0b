"""The count behind bench/turn.py's ``seal_ms_per_turn`` (docs/adr/0058):
through real turns on the real core, tests/seal_meter.py counts every seal,
and the counts are what the ledger and the blob store hold: one
``seal_turn`` per sealed record, one ``seal_blob`` per sealed blob, two
AES-GCM calls per box, the plaintext bytes of exactly those boxes, no
subject key unwrapped (the ring keeps the one it made), and the meter's
replay of the recorded calls seals and opens the same way."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

from naga.v1 import agent_pb2 as apb
from naga_core._home import Home
from naga_core._store import blob_store, open_ledger
from naga_core.agent import AgentConfig
from naga_core.memory import KeyRing, Sealer, is_sealed_blob
from tests.agent.conftest import ServerThread, final, write_providers
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply
from tests.plugin_host.conftest import READY_S
from tests.seal_meter import Call, meter_seal, replay_us

_TEXT_FIELDS = ("text", "arguments_json", "result_json", "error", "error_message")
TURNS = 3


def _inner_bytes(opened: apb.TurnRecord) -> int:
    """The plaintext a record's box holds: its text fields as a TurnRecord."""
    inner = apb.TurnRecord()
    for name in _TEXT_FIELDS:
        if getattr(opened, name):
            setattr(inner, name, getattr(opened, name))
    return inner.ByteSize()


def test_the_seal_count_matches_the_ledger(model_server: ServerThread) -> None:
    root = tempfile.mkdtemp(prefix="naga-sc-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    per_turn: list[dict[str, int]] = []
    calls: list[list[Call]] = []
    try:
        with (
            meter_seal() as meter,
            core_in_thread(home, agent=AgentConfig(executors=1, turn_timeout_s=60)) as core,
            core.client() as c,
        ):
            meter.recording = True
            for i in range(TURNS):
                model_server.script(Reply.answer(f"answer {i}"))
                before, n0 = dict(meter.counts), len(meter.calls)
                events = list(
                    c.run_turn(f"sc-{i % 2}", f"question {i}", uuid.uuid4().hex, timeout=READY_S)
                )
                final(events)
                per_turn.append({k: v - before.get(k, 0) for k, v in meter.counts.items()})
                calls.append(meter.calls[n0:])
            c.shutdown("seal count done")
            assert not core.join().failed
        counts = meter.counts

        h = Home(home)
        sealer = Sealer.reader(h)
        blobs = blob_store(h)
        with open_ledger(h, create=False) as ledger:
            records = [r for r in ledger.iter_records() if r.kind.startswith("turn.")]
        sealed = [apb.TurnRecord.FromString(r.payload) for r in records]
        sealed_records = [
            (r.kind, b) for r, b in zip(records, sealed, strict=True) if b.HasField("sealed")
        ]
        stored = [blobs.get(d) for d in blobs.iter_digests()]
        sealed_blobs = [b for b in stored if is_sealed_blob(b)]

        # Every turn sealed something: its message, its reply, the model's
        # request and answer.
        for seen in per_turn:
            assert seen["seal_turn"] >= 2, seen
            assert seen["seal_blob"] >= 2, seen
        assert counts["seal_turn"] == len(sealed_records) > 0
        assert counts["seal_turn"] + counts["seal_turn_clear"] == len(records)
        assert counts["seal_blob"] == len(sealed_blobs) == len(stored) > 0
        # One subject (the owner), its key made once and kept: never read
        # back and unwrapped.
        assert counts["kek_wrap"] == 1
        assert counts["kek_unwrap"] == 0
        boxes = counts["seal_turn"] + counts["seal_blob"]
        assert counts["aead_seal"] == 2 * boxes + counts["kek_wrap"]
        # A data key per box, the subject key, the master key.
        assert counts["key_new"] == boxes + counts["kek_wrap"] + 1
        plaintext = sum(_inner_bytes(sealer.open_turn(k, b)) for k, b in sealed_records)
        opened_blobs = [sealer.open_blob(b) for b in sealed_blobs]
        assert all(b is not None for b in opened_blobs)
        plaintext += sum(len(b or b"") for b in opened_blobs)
        assert counts["bytes:sealed"] == plaintext + 32 * (boxes + counts["kek_wrap"])
        # What sealing added to the payloads: each sealed one against itself
        # opened (the record as the agent staged it).
        growth = sum(b.ByteSize() - sealer.open_turn(k, b).ByteSize() for k, b in sealed_records)
        assert counts["bytes:record_growth"] == growth

        # The replay runs the very calls recorded (as many as counted).
        recorded = [m for turn in calls for m, _a in turn]
        assert recorded.count("seal_turn") == sum(
            t["seal_turn"] + t.get("seal_turn_clear", 0) for t in per_turn
        )
        assert recorded.count("seal_blob") == sum(t["seal_blob"] for t in per_turn)
        wall, cpu = replay_us(Sealer(KeyRing.of_home(h)), calls, reps=2)
        assert len(wall) == len(cpu) == 2 * TURNS
        assert all(us > 0 for us in wall)
    finally:
        shutil.rmtree(root, ignore_errors=True)
