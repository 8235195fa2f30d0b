"""Bad tokens and bad requests under a good token never hurt the core
(SPEC section 7): random credential bytes, garbled tokens and random
Spawn/Spend bodies get a clean gRPC error, the core keeps serving, and its
ledger verifies afterwards."""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naga.sdk import Client
from naga.tokens import Risk, TrustLevel
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.daemon.token_helpers import verify_offline

CLEAN = {
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.FAILED_PRECONDITION,
}
_fuzz = settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class Served:
    def __init__(self, core: InProcessCore, channel: grpc.Channel, token: bytes) -> None:
        self.core = core
        self.channel = channel
        self.token = token

    def call(self, method: str, raw: bytes, credential: bytes) -> grpc.StatusCode:
        fn: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(method)
        value = "Capability " + base64.b64encode(credential).decode()
        try:
            fn(raw, timeout=10, metadata=(("authorization", value),))
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[attr-defined,no-any-return]
        return grpc.StatusCode.OK


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with tempfile.TemporaryDirectory(prefix="naga-tf-") as root:
        home = root + "/home"
        with core_in_thread(home) as core:
            with Client.connect(home) as owner:
                token = owner.mint(
                    "executor", trust=TrustLevel.KNOWN, risk=Risk.R1, budget=1000, session="s-1"
                ).token.to_bytes()
            with grpc.insecure_channel("unix:" + core.info.socket) as channel:
                yield Served(core, channel, token)
            with core.client() as c:
                assert c.status().processes[0].role == "core"
                c.shutdown("fuzz done")
            assert not core.join().failed
        verify_offline(home)


@_fuzz
@given(credential=st.binary(max_size=512))
def test_random_credential_bytes_get_a_clean_answer(served: Served, credential: bytes) -> None:
    code = served.call("/naga.v1.LedgerService/GetHead", b"", credential)
    assert code in CLEAN, code


@_fuzz
@given(at=st.integers(min_value=0), bit=st.integers(0, 7))
def test_every_garbled_token_is_refused(served: Served, at: int, bit: int) -> None:
    raw = bytearray(served.token)
    raw[at % len(raw)] ^= 1 << bit
    code = served.call("/naga.v1.LedgerService/GetHead", b"", bytes(raw))
    assert code in {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT}, code


@pytest.mark.parametrize("method", ["/naga.v1.AuthzService/Spawn", "/naga.v1.AuthzService/Spend"])
@_fuzz
@given(raw=st.binary(max_size=256))
def test_raw_bytes_under_a_good_token_get_a_clean_answer(
    served: Served, method: str, raw: bytes
) -> None:
    code = served.call(method, raw, served.token)
    assert code is grpc.StatusCode.OK or code in CLEAN, code
