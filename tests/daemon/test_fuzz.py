"""Bad input never hurts the core (SPEC section 7): malformed bytes, oversized
and out-of-range fields for every RPC get a clean gRPC error, the core keeps
serving, and the ledger verifies afterwards.

Raw bytes go through a generic channel call (no serializer), so undecodable
messages reach the server as they are.
"""

from __future__ import annotations

import base64
import shutil
import tempfile
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naga.constants import MAX_RPC_REQUEST_BYTES
from naga.sdk import owner_credential
from naga.v1 import authz_pb2 as apb
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import ledger_pb2 as lpb
from naga.v1 import plugin_service_pb2 as spb
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.ledger_helpers import verify_home

UNARY = [
    "/naga.v1.KernelService/History",
    "/naga.v1.KernelService/Rollback",
    "/naga.v1.KernelService/GetSetting",
    "/naga.v1.KernelService/SetSetting",
    "/naga.v1.KernelService/ListSettings",
    "/naga.v1.KernelService/GetTrust",
    "/naga.v1.KernelService/SetTrust",
    "/naga.v1.KernelService/ListTrust",
    "/naga.v1.LedgerService/GetHead",
    "/naga.v1.LedgerService/GetRecords",
    "/naga.v1.LedgerService/ProveInclusion",
    "/naga.v1.LedgerService/ProveConsistency",
    "/naga.v1.SupervisorService/Status",
    "/naga.v1.AuthzService/Mint",
    "/naga.v1.AuthzService/Revoke",
    "/naga.v1.AuthzService/Inspect",
    "/naga.v1.PluginService/List",
    "/naga.v1.PluginService/Enable",
    "/naga.v1.PluginService/Disable",
    "/naga.v1.PluginService/Replace",
    "/naga.v1.PluginService/Invoke",
    # Shutdown is left out: any bytes that decode would (rightly) stop the core.
    # Spawn and Spend take a token, not the owner: tests/daemon/test_token_fuzz.py.
]
SUBSCRIBE = "/naga.v1.LedgerService/Subscribe"

#: What bad input may get. Never INTERNAL, UNKNOWN, UNAVAILABLE or DATA_LOSS.
CLEAN = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}

_fuzz = settings(
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

Call = tuple[grpc.Channel, tuple[tuple[str, str], ...]]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[InProcessCore, Call]]:
    root = tempfile.mkdtemp(prefix="naga-f-")
    home = root + "/home"
    try:
        with core_in_thread(home) as core:
            with core.client() as c:  # records for the fuzz to sit on, whichever tests run
                c.set_setting("agent.max_steps", 41)
            token = base64.b64encode(owner_credential(home)).decode()
            with grpc.insecure_channel("unix:" + core.info.socket) as channel:
                yield core, (channel, (("authorization", "Naga " + token),))
            with core.client() as c:
                c.shutdown("fuzz done")
            assert not core.join().failed
        _verify_stopped(home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _unary(call: Call, method: str, raw: bytes) -> grpc.StatusCode:
    channel, metadata = call
    fn: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)
    try:
        fn(raw, timeout=10, metadata=metadata)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[attr-defined,no-any-return]
    return grpc.StatusCode.OK


def _first_event(call: Call, raw: bytes) -> grpc.StatusCode:
    channel, metadata = call
    fn: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(SUBSCRIBE)
    stream = fn(raw, timeout=10, metadata=metadata)
    try:
        next(iter(stream))
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[attr-defined,no-any-return]
    finally:
        stream.cancel()  # type: ignore[attr-defined]
    return grpc.StatusCode.OK


def _assert_clean(code: grpc.StatusCode) -> None:
    assert code is grpc.StatusCode.OK or code in CLEAN, code


def _verify_stopped(home: str) -> None:
    """The ledger (and the projection the core caught up at stop) verify."""
    assert verify_home(home) > 0  # the setup's write and the fuzz's (SetSettings, rollbacks)


@pytest.mark.parametrize("method", UNARY)
@_fuzz
@given(raw=st.binary(max_size=256))
def test_raw_bytes_get_a_clean_answer(
    served: tuple[InProcessCore, Call], method: str, raw: bytes
) -> None:
    _core, call = served
    _assert_clean(_unary(call, method, raw))


@_fuzz
@given(raw=st.binary(max_size=256))
def test_raw_bytes_to_subscribe_get_a_clean_answer(
    served: tuple[InProcessCore, Call], raw: bytes
) -> None:
    _assert_clean(_first_event(served[1], raw))


def test_undecodable_messages_name_the_message_type(served: tuple[InProcessCore, Call]) -> None:
    channel, metadata = served[1]
    fn: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        "/naga.v1.KernelService/History"
    )
    with pytest.raises(grpc.RpcError) as refused:
        fn(b"\xff\xff\xff", timeout=10, metadata=metadata)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "not a valid naga.v1.HistoryRequest" in refused.value.details()  # type: ignore[attr-defined]


_u64 = st.integers(0, 2**64 - 1)
_u32 = st.integers(0, 2**32 - 1)
_s64 = st.integers(-(2**63), 2**63 - 1)
_text = st.text(max_size=300) | st.sampled_from(["agent.max_steps", "wechat:bob", "x" * 2000])
_value = st.one_of(
    st.builds(kpb.Value, text=_text),
    st.builds(kpb.Value, integer=_s64),
    st.builds(kpb.Value, real=st.floats()),
    st.builds(kpb.Value, flag=st.booleans()),
    st.builds(kpb.Value, raw=st.binary(max_size=64)),
    st.just(kpb.Value()),
)
_plugin = _text | st.sampled_from(["clock", "notes", "x" * 41])
_history = st.builds(cpb.HistoryRequest, limit=_u32) | st.builds(
    cpb.HistoryRequest, limit=_u32, before_seq=_u64
)
_set_setting = st.one_of(
    st.builds(cpb.SetSettingRequest, name=_text, value=_value),
    st.builds(cpb.SetSettingRequest, name=_text, text=_text),
    st.builds(cpb.SetSettingRequest, name=_text, reset=st.booleans()),
    st.builds(cpb.SetSettingRequest, name=_text),
)
REQUESTS: list[tuple[str, st.SearchStrategy[Message]]] = [
    ("/naga.v1.KernelService/History", _history),
    (
        "/naga.v1.KernelService/Rollback",
        st.builds(cpb.RollbackRequest, to_seq=_s64, dry_run=st.just(True), by_owner=st.booleans()),
    ),
    ("/naga.v1.KernelService/GetSetting", st.builds(cpb.GetSettingRequest, name=_text)),
    ("/naga.v1.KernelService/SetSetting", _set_setting),
    ("/naga.v1.KernelService/GetTrust", st.builds(cpb.GetTrustRequest, peer=_text)),
    (
        "/naga.v1.KernelService/SetTrust",
        st.builds(
            cpb.SetTrustRequest,
            peer=_text,
            level=st.integers(-(2**31), 2**31 - 1),
            by_owner=st.booleans(),
            reason=_text,
        ),
    ),
    (
        "/naga.v1.LedgerService/GetRecords",
        st.builds(lpb.GetRecordsRequest, from_seq=_u64, limit=_u32),
    ),
    ("/naga.v1.LedgerService/ProveInclusion", st.builds(lpb.ProveInclusionRequest, seq=_u64)),
    (
        "/naga.v1.LedgerService/ProveConsistency",
        st.builds(lpb.ProveConsistencyRequest, old_size=_u64, new_size=_u64),
    ),
    (
        "/naga.v1.SupervisorService/Shutdown",
        st.builds(cpb.ShutdownRequest, reason=st.just("x" * 501)),
    ),
    (
        "/naga.v1.AuthzService/Mint",
        st.builds(
            apb.MintRequest,
            role=_text | st.sampled_from(["executor", "gateway"]),
            trust=st.integers(-(2**31), 2**31 - 1),
            risk=st.integers(-(2**31), 2**31 - 1),
            session=_text,
            principal=_text,
            budget=_u64,
            ttl_ns=_u64,
        ),
    ),
    (
        "/naga.v1.AuthzService/Revoke",
        st.builds(apb.RevokeRequest, token_id=st.binary(max_size=40), reason=_text),
    ),
    ("/naga.v1.AuthzService/Inspect", st.builds(apb.InspectRequest, token=st.binary(max_size=600))),
    (
        "/naga.v1.PluginService/Enable",
        st.builds(spb.EnablePluginRequest, name=_plugin, wait_ms=_u32),
    ),
    ("/naga.v1.PluginService/Disable", st.builds(spb.DisablePluginRequest, name=_plugin)),
    (
        "/naga.v1.PluginService/Replace",
        st.builds(spb.ReplacePluginRequest, name=_plugin, version=_text, wait_ms=_u32),
    ),
    (
        "/naga.v1.PluginService/Invoke",
        st.builds(
            spb.InvokeToolRequest,
            plugin=_plugin,
            tool=_text | st.just("clock.now"),
            arguments_json=_text | st.just('{"timezone": "UTC"}') | st.just("[" * 30_000),
            # 0 (the plugin's own) or out of range: a short but valid caller
            # timeout would rightly answer DEADLINE_EXCEEDED.
            timeout_ms=st.sampled_from([0, 600_001, 2**32 - 1]),
        ),
    ),
]


@pytest.mark.parametrize(("method", "requests"), REQUESTS, ids=[m for m, _ in REQUESTS])
@_fuzz
@given(data=st.data())
def test_out_of_range_fields_get_a_clean_answer(
    served: tuple[InProcessCore, Call],
    method: str,
    requests: st.SearchStrategy[Message],
    data: st.DataObject,
) -> None:
    request = data.draw(requests)
    _assert_clean(_unary(served[1], method, request.SerializeToString()))


@_fuzz
@given(
    from_seq=_u64,
    kinds=st.lists(st.text(max_size=80) | st.just("kernel.effect"), max_size=80),
)
def test_subscribe_fields_get_a_clean_answer(
    served: tuple[InProcessCore, Call], from_seq: int, kinds: list[str]
) -> None:
    request = lpb.SubscribeRequest(from_seq=from_seq, kinds=kinds)
    _assert_clean(_first_event(served[1], request.SerializeToString()))


@pytest.mark.parametrize("method", [*UNARY, "/naga.v1.SupervisorService/Shutdown"])
def test_oversized_requests_are_refused(served: tuple[InProcessCore, Call], method: str) -> None:
    oversized = b"\x0a" + b"\xff" * (MAX_RPC_REQUEST_BYTES + 1000)
    assert _unary(served[1], method, oversized) is (grpc.StatusCode.RESOURCE_EXHAUSTED)


def test_the_core_still_serves_after_the_fuzz(served: tuple[InProcessCore, Call]) -> None:
    # Runs last in this module (pytest keeps file order): everything above went through.
    core, _ = served
    with core.client() as c:
        assert c.status().processes[0].role == "core"
        assert c.set_setting("agent.max_steps", 42).setting.value.integer == 42
