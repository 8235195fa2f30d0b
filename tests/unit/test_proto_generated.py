"""The committed ``naga.v1`` code matches ``proto/`` and works.

The staleness check is the guard that makes committing generated code safe
(docs/adr/0001-proto-generation.md): edit a ``.proto`` without rerunning
``scripts/gen_proto.py`` and this fails with the list of files to regenerate.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from naga.v1 import ledger_pb2, ledger_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]
GEN_SCRIPT = REPO_ROOT / "scripts" / "gen_proto.py"


def test_generated_code_is_up_to_date() -> None:
    # sys.executable, not "python": the script finds the protoc plugins next
    # to the interpreter, and the generator versions it checks are this
    # environment's.
    result = subprocess.run(
        [sys.executable, str(GEN_SCRIPT), "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode != 0:
        pytest.fail(
            f"scripts/gen_proto.py --check exited {result.returncode}:\n"
            f"{result.stdout}{result.stderr}",
            pytrace=False,
        )


def _digest(label: bytes) -> bytes:
    return hashlib.sha256(label).digest()


def test_record_round_trips_through_the_wire_format() -> None:
    record = ledger_pb2.Record(
        # Extremes of each integer type, where a wrong field type (uint32,
        # int32, uint64 for a signed field) would wrap or be rejected.
        seq=2**64 - 1,
        timestamp_ns=-(2**63),
        kind="effect.perform",
        payload=b"\x00\xffpayload\x00",
        blob_refs=[_digest(b"blob-a"), _digest(b"blob-b")],
        prev_hash=bytes(32),
        leaf_hash=_digest(b"\x00record body"),
    )

    wire = record.SerializeToString(deterministic=True)
    decoded = ledger_pb2.Record.FromString(wire)

    assert decoded == record
    assert decoded.seq == 2**64 - 1
    assert decoded.timestamp_ns == -(2**63)
    assert decoded.kind == "effect.perform"
    assert decoded.payload == b"\x00\xffpayload\x00"
    assert list(decoded.blob_refs) == [_digest(b"blob-a"), _digest(b"blob-b")]
    assert all(len(ref) == 32 for ref in decoded.blob_refs)
    assert decoded.prev_hash == bytes(32)
    assert decoded.leaf_hash == _digest(b"\x00record body")
    assert decoded.SerializeToString(deterministic=True) == wire


def test_record_field_numbers_are_frozen() -> None:
    # Field numbers are the wire contract: renumbering one silently breaks
    # every peer built from an older naga.v1. Adding fields is fine (extend
    # this mapping); changing an existing entry is not.
    numbers = {field.name: field.number for field in ledger_pb2.Record.DESCRIPTOR.fields}
    assert numbers == {
        "seq": 1,
        "timestamp_ns": 2,
        "kind": 3,
        "payload": 4,
        "blob_refs": 5,
        "prev_hash": 6,
        "leaf_hash": 7,
    }


def test_grpc_module_exposes_the_ledger_service() -> None:
    assert isinstance(ledger_pb2_grpc.LedgerServiceStub, type)
    assert isinstance(ledger_pb2_grpc.LedgerServiceServicer, type)
    assert callable(ledger_pb2_grpc.add_LedgerServiceServicer_to_server)

    service = ledger_pb2.DESCRIPTOR.services_by_name["LedgerService"]
    assert service.full_name == "naga.v1.LedgerService"
    rpcs = {
        "GetHead",
        "GetRecords",
        "ProveInclusion",
        "ProveConsistency",
        "Subscribe",
        "GetBlob",
    }
    assert set(service.methods_by_name) == rpcs
    assert service.methods_by_name["Subscribe"].server_streaming
    assert service.methods_by_name["GetBlob"].server_streaming
    for name in rpcs:
        assert callable(getattr(ledger_pb2_grpc.LedgerServiceServicer, name))


class _OneRecordLedger(ledger_pb2_grpc.LedgerServiceServicer):
    """Answers like a ledger holding one record; method names are the RPC
    names the proto fixes, hence the N802 exemptions."""

    def GetHead(  # noqa: N802
        self, request: ledger_pb2.GetHeadRequest, context: grpc.ServicerContext
    ) -> ledger_pb2.Head:
        return ledger_pb2.Head(size=1, last_seq=0, root=_digest(b"root"))

    def GetRecords(  # noqa: N802
        self, request: ledger_pb2.GetRecordsRequest, context: grpc.ServicerContext
    ) -> ledger_pb2.GetRecordsResponse:
        records = [ledger_pb2.Record(seq=0, kind="test")] if request.from_seq == 0 else []
        return ledger_pb2.GetRecordsResponse(records=records)

    def ProveInclusion(  # noqa: N802
        self, request: ledger_pb2.ProveInclusionRequest, context: grpc.ServicerContext
    ) -> ledger_pb2.InclusionProof:
        if request.seq >= 1:
            context.abort(grpc.StatusCode.OUT_OF_RANGE, f"seq {request.seq} >= size 1")
        return ledger_pb2.InclusionProof(seq=request.seq, tree_size=1)

    def ProveConsistency(  # noqa: N802
        self, request: ledger_pb2.ProveConsistencyRequest, context: grpc.ServicerContext
    ) -> ledger_pb2.ConsistencyProof:
        return ledger_pb2.ConsistencyProof(old_size=1, new_size=1)

    def Subscribe(  # noqa: N802
        self, request: ledger_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[ledger_pb2.SubscribeEvent]:
        yield ledger_pb2.SubscribeEvent(caught_up=ledger_pb2.CaughtUp(next_seq=1))

    def GetBlob(  # noqa: N802
        self, request: ledger_pb2.GetBlobRequest, context: grpc.ServicerContext
    ) -> Iterator[ledger_pb2.BlobChunk]:
        yield ledger_pb2.BlobChunk(data=b"", size=0)


@pytest.fixture
def ledger_channel(tmp_path: Path) -> Iterator[grpc.Channel]:
    # A Unix socket, as the core serves it (SPEC section 1); no TCP port to
    # collide with a parallel test run.
    address = f"unix:{tmp_path / 'core.sock'}"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    ledger_pb2_grpc.add_LedgerServiceServicer_to_server(_OneRecordLedger(), server)
    server.add_insecure_port(address)
    server.start()
    channel = grpc.insecure_channel(address)
    try:
        yield channel
    finally:
        channel.close()
        server.stop(grace=None)


def test_generated_stub_and_servicer_talk_over_grpc(ledger_channel: grpc.Channel) -> None:
    stub = ledger_pb2_grpc.LedgerServiceStub(ledger_channel)

    head = stub.GetHead(ledger_pb2.GetHeadRequest(), timeout=10)
    assert (head.size, head.last_seq, head.root) == (1, 0, _digest(b"root"))

    page = stub.GetRecords(ledger_pb2.GetRecordsRequest(from_seq=0), timeout=10)
    assert [(r.seq, r.kind) for r in page.records] == [(0, "test")]

    # Errors travel as gRPC status codes, as the proto documents them.
    with pytest.raises(grpc.RpcError) as caught:
        stub.ProveInclusion(ledger_pb2.ProveInclusionRequest(seq=1), timeout=10)
    error = caught.value
    assert isinstance(error, grpc.Call)
    assert error.code() == grpc.StatusCode.OUT_OF_RANGE
    assert error.details() == "seq 1 >= size 1"
