"""Each way a model call fails, against the fake provider over real HTTP:
the specific error kind, a message a person can act on, the retries (on a
virtual clock), and an adapter that still works for the next call."""

from __future__ import annotations

import random
import socket
import time

import pytest
import trio

from naga.v1 import model_pb2
from naga_plugins.models import Endpoint, ModelAdapter, Timeouts
from naga_plugins.models.errors import (
    AuthRefused,
    ModelCallFailed,
    ModelNotFound,
    RateLimited,
    ServerFailed,
    StreamCut,
    TimedOut,
    Unreachable,
)
from tests.fakes.clock import VirtualClock
from tests.fakes.model_server import Reply, open_model_server
from tests.models.support import API_KEY, APIS, FAST, RETRY, Chunks, endpoint_for, hi, rig
from tests.seeds import pick_seed


def _kind(error: ModelCallFailed) -> str:
    return error.kind_name


@pytest.mark.parametrize("api", APIS)
def test_refused_connection_is_unreachable_retried_and_recovers(api: str) -> None:
    async def main() -> None:
        # A bound socket that does not listen: connections to it are refused.
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        base = f"http://127.0.0.1:{port}" + ("/v1" if api == "openai" else "")
        endpoint = Endpoint.of(provider="local", base_url=base, api_key=API_KEY, model="m")
        clock = VirtualClock()
        adapter = ModelAdapter.for_api(
            api, endpoint, timeouts=FAST, retry=RETRY, clock=clock, rng=random.Random(1)
        )
        async with adapter:
            with pytest.raises(Unreachable) as caught:
                await adapter.complete(hi())
            error = caught.value
            assert _kind(error) == "UNREACHABLE"
            assert error.attempts == 3
            assert len(clock.sleeps) == 2
            assert str(error) == (
                f"local: cannot connect to 127.0.0.1:{port}: Connection refused; "
                "gave up after 3 attempts; check that the server is running and that "
                "base_url is right"
            )
            assert error.http_status == 0

            holder.close()  # the provider comes up on that port
            async with open_model_server(port) as server:
                server.script(Reply.answer("up now"))
                assert (await adapter.complete(hi())).message.content == "up now"

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_401_is_auth_not_retried_and_never_shows_the_key(api: str) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(
                Reply.error(401, f"Incorrect API key provided: {API_KEY}."),
                Reply.answer("fine now"),
            )
            with pytest.raises(AuthRefused) as caught:
                await r.adapter.complete(hi())
            error = caught.value
            assert str(error) == (
                "fake: refused the API key (HTTP 401: Incorrect API key provided: "
                "[api key removed].); check api_key in providers.json"
            )
            assert error.attempts == 1
            assert r.clock.sleeps == []
            wire = error.to_proto()
            assert wire.kind == model_pb2.MODEL_ERROR_KIND_AUTH
            assert wire.http_status == 401
            assert wire.provider == "fake"
            expected_code = "invalid_request_error" if api == "openai" else "authentication_error"
            assert wire.provider_code == expected_code
            for text in (str(error), repr(error), repr(r.adapter.endpoint)):
                assert API_KEY not in text
            assert API_KEY.encode() not in wire.SerializeToString()

            assert (await r.adapter.complete(hi())).message.content == "fine now"

    trio.run(main)


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_429_waits_the_retry_after_then_succeeds(api: str, streamed: bool) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(
                Reply.error(429, "Rate limit reached", headers=(("retry-after", "7"),)),
                Reply.answer("after the wait"),
            )
            if streamed:
                response = await r.adapter.stream(hi(), Chunks())
            else:
                response = await r.adapter.complete(hi())
            assert response.message.content == "after the wait"
            assert response.attempts == 2
            assert r.clock.sleeps == [7.0]
            assert len(r.server.requests) == 2
            assert r.server.requests[0].body == r.server.requests[1].body

    trio.run(main)


def test_openai_retry_after_ms_is_finer_than_retry_after() -> None:
    async def main() -> None:
        async with rig("openai") as r:
            headers = (("retry-after", "2"), ("retry-after-ms", "1500"))
            r.server.script(Reply.error(429, "slow down", headers=headers), Reply.answer("ok"))
            await r.adapter.complete(hi())
            assert r.clock.sleeps == [1.5]

    trio.run(main)


@pytest.mark.parametrize(
    ("status", "message", "error_class", "kind"),
    [
        (429, "Rate limit reached", RateLimited, "RATE_LIMITED"),
        (500, "Internal error", ServerFailed, "SERVER"),
        (503, "Service unavailable", ServerFailed, "SERVER"),
    ],
)
@pytest.mark.parametrize("api", APIS)
def test_retried_statuses_give_up_after_max_attempts_with_backoff(
    api: str, status: int, message: str, error_class: type[ModelCallFailed], kind: str
) -> None:
    seed = pick_seed()
    print(f"NAGA_TEST_SEED={seed}")

    async def main() -> None:
        async with rig(api, seed=seed) as r:
            r.server.script(*(Reply.error(status, message) for _ in range(3)), Reply.answer("ok"))
            with pytest.raises(error_class) as caught:
                await r.adapter.complete(hi())
            error = caught.value
            assert error.kind_name == kind
            assert error.attempts == 3
            assert str(error).endswith(f"(HTTP {status}: {message}); gave up after 3 attempts")
            # Equal jitter: after the n-th failure, between half of and the
            # whole exponential step (base 0.5 s, doubling).
            first, second = r.clock.sleeps
            assert 0.25 <= first <= 0.5
            assert 0.5 <= second <= 1.0
            assert (await r.adapter.complete(hi())).message.content == "ok"

    trio.run(main)


@pytest.mark.parametrize(
    ("api", "status"), [("openai", 408), ("anthropic", 408), ("anthropic", 529), ("openai", 502)]
)
def test_transient_statuses_are_retried_then_succeed(api: str, status: int) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.error(status, "try again"), Reply.answer("second time"))
            response = await r.adapter.complete(hi())
            assert (response.message.content, response.attempts) == ("second time", 2)

    trio.run(main)


@pytest.mark.parametrize(
    ("api", "status", "error_type", "kind", "words"),
    [
        ("openai", 400, "", "REFUSED_INPUT", "refused the request (HTTP 400: "),
        ("anthropic", 413, "", "REFUSED_INPUT", "refused the request (HTTP 413: "),
        ("openai", 422, "", "REFUSED_INPUT", "refused the request (HTTP 422: "),
        ("openai", 403, "", "AUTH", "refused access (forbidden)"),
        ("openai", 402, "", "QUOTA", "no credit left"),
        ("openai", 429, "insufficient_quota", "QUOTA", "quota is used up"),
        ("anthropic", 404, "", "NOT_FOUND", "check base_url and model"),
    ],
)
def test_refusals_are_not_retried(
    api: str, status: int, error_type: str, kind: str, words: str
) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(
                Reply.error(status, "the provider's words", error_type=error_type),
                Reply.answer("next"),
            )
            with pytest.raises(ModelCallFailed) as caught:
                await r.adapter.complete(hi())
            error = caught.value
            assert error.kind_name == kind
            assert words in str(error)
            assert "the provider's words" in str(error)
            assert error.attempts == 1
            assert r.clock.sleeps == []
            assert len(r.server.requests) == 1
            assert (await r.adapter.complete(hi())).message.content == "next"

    trio.run(main)


def test_404_names_the_model_and_url() -> None:
    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.error(404, "The model `fake-model-1` does not exist"))
            with pytest.raises(ModelNotFound) as caught:
                await r.adapter.complete(hi())
            assert f"model 'fake-model-1' at {r.server.openai_url}" in str(caught.value)

    trio.run(main)


def test_a_retry_after_longer_than_the_policy_fails_at_once() -> None:
    async def main() -> None:
        async with rig("anthropic") as r:
            headers = (("retry-after", "600"),)
            r.server.script(Reply.error(429, "Number of requests exceeded", headers=headers))
            with pytest.raises(RateLimited) as caught:
                await r.adapter.complete(hi())
            error = caught.value
            assert "it asks to wait 600 s, longer than the 30 s the retry policy waits" in str(
                error
            )
            assert error.to_proto().retry_after_s == 600.0
            assert r.clock.sleeps == []

    trio.run(main)


def test_a_retry_that_would_pass_the_deadline_is_not_made() -> None:
    async def main() -> None:
        timeouts = Timeouts(connect_s=2, read_s=1, write_s=2, pool_s=2, deadline_s=5)
        async with rig("openai", timeouts=timeouts) as r:
            r.server.script(Reply.error(503, "busy", headers=(("retry-after", "10"),)))
            with pytest.raises(ServerFailed) as caught:
                await r.adapter.complete(hi())
            assert "a retry in 10 s would pass the call's 5 s deadline" in str(caught.value)
            assert r.clock.sleeps == []

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_a_stream_cut_mid_way_carries_what_arrived_and_is_not_retried(api: str) -> None:
    async def main() -> None:
        async with rig(api) as r:
            text = "One, two, three, four, five, six."
            # openai: role chunk + 3 text events; anthropic: start, block, ping, 1 text event.
            r.server.script(Reply.cut(text, after_events=4, pieces=4), Reply.answer("whole"))
            chunks = Chunks()
            with pytest.raises(StreamCut) as caught:
                await r.adapter.stream(hi(), chunks)
            error = caught.value
            assert error.kind_name == "CUT"
            assert chunks.text
            assert text.startswith(chunks.text)
            assert chunks.text != text
            assert error.partial is not None
            assert error.partial.message.content == chunks.text
            assert error.partial.finish_reason == model_pb2.FINISH_REASON_UNSPECIFIED
            assert error.to_proto().partial.message.content == chunks.text
            assert f"the answer was cut after {len(chunks.got)} chunks" in str(error)
            assert error.attempts == 1  # the caller saw chunks: no retry
            assert len(r.server.requests) == 1
            assert (await r.adapter.stream(hi(), Chunks())).message.content == "whole"

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_a_cut_before_any_chunk_is_retried(api: str) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.cut("lost", after_events=0), Reply.answer("second try"))
            chunks = Chunks()
            response = await r.adapter.stream(hi(), chunks)
            assert (response.message.content, response.attempts) == ("second try", 2)
            assert chunks.text == "second try"

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_a_non_streamed_body_cut_in_half_is_cut_after_the_retries(api: str) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(*(Reply.cut("a long answer", after_events=0) for _ in range(3)))
            with pytest.raises(StreamCut) as caught:
                await r.adapter.complete(hi())
            assert caught.value.attempts == 3
            assert caught.value.partial is None
            assert str(caught.value).startswith("fake: the answer was cut before its end: ")

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_a_stall_is_a_timeout_and_the_adapter_recovers(api: str) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.stall(), Reply.answer("awake"))
            started = time.monotonic()
            with pytest.raises(TimedOut) as caught:
                await r.adapter.complete(hi())
            waited = time.monotonic() - started
            assert 0.45 <= waited < 5
            assert str(caught.value) == "fake: sent no answer for 0.5 s (the read timeout)"
            assert caught.value.attempts == 1  # the provider may be working on it: no resend
            assert (await r.adapter.complete(hi())).message.content == "awake"

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_a_stall_mid_stream_is_a_timeout_with_the_partial_answer(api: str) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.stall("Some words then nothing", after_events=4))
            chunks = Chunks()
            with pytest.raises(TimedOut) as caught:
                await r.adapter.stream(hi(), chunks)
            error = caught.value
            assert f"stalled: no data for 0.5 s after {len(chunks.got)} chunks" in str(error)
            assert error.partial is not None
            assert error.partial.message.content == chunks.text != ""

    trio.run(main)


def test_the_overall_deadline_bounds_a_slow_trickle() -> None:
    async def main() -> None:
        timeouts = Timeouts(connect_s=2, read_s=30, write_s=2, pool_s=2, deadline_s=0.3)
        async with rig("anthropic", timeouts=timeouts) as r:
            r.server.script(Reply.stall("never finishes", after_events=3), Reply.answer("ok"))
            chunks = Chunks()
            with pytest.raises(TimedOut) as caught:
                await r.adapter.stream(hi(), chunks)
            assert "no complete answer within the call's 0.3 s deadline" in str(caught.value)
            assert caught.value.partial is not None
            assert caught.value.partial.message.content == chunks.text
            assert (await r.adapter.complete(hi())).message.content == "ok"

    trio.run(main)


@pytest.mark.parametrize(
    ("api", "error_type", "error_class"),
    [
        ("anthropic", "overloaded_error", ServerFailed),
        ("anthropic", "rate_limit_error", RateLimited),
        ("openai", "server_error", ServerFailed),
    ],
)
def test_an_error_event_in_a_stream(
    api: str, error_type: str, error_class: type[ModelCallFailed]
) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(
                Reply.stream_error(
                    "Half an answer", after_events=4, error_type=error_type, message="Overloaded"
                ),
                Reply.stream_error("", after_events=0, error_type=error_type, message="Busy"),
                Reply.answer("recovered"),
            )
            chunks = Chunks()
            with pytest.raises(error_class) as caught:
                await r.adapter.stream(hi(), chunks)
            error = caught.value
            assert "Overloaded" in str(error)
            assert error.provider_code == error_type
            assert error.partial is not None
            assert error.partial.message.content == chunks.text != ""
            assert error.attempts == 1
            # Before any chunk, the same event is retried like a 5xx.
            response = await r.adapter.stream(hi(), Chunks())
            assert (response.message.content, response.attempts) == ("recovered", 2)

    trio.run(main)


def test_a_stream_that_ends_without_its_end_event_is_cut() -> None:
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n'

    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.raw(chunk, content_type="text/event-stream"))
            chunks = Chunks()
            with pytest.raises(StreamCut) as caught:
                await r.adapter.stream(hi(), chunks)
            assert "the stream ended without its end event after 1 chunks" in str(caught.value)
            assert caught.value.partial is not None
            assert caught.value.partial.message.content == "Hel"

    trio.run(main)


def test_error_kinds_of_the_proto_have_a_class_each() -> None:
    from naga_plugins.models import errors

    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type)
        and issubclass(value, ModelCallFailed)
        and value is not ModelCallFailed
    ]
    kinds = {cls.kind for cls in classes}
    assert len(kinds) == len(classes)
    assert kinds == set(model_pb2.ModelErrorKind.values()) - {
        model_pb2.MODEL_ERROR_KIND_UNSPECIFIED
    }
    for cls in classes:
        assert issubclass(cls, errors.ProviderError)


def test_connecting_to_the_fake_over_a_real_socket() -> None:
    # The rig's adapter reaches the server through httpx's own transport,
    # not an in-memory stand-in.
    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer("x"))
            await r.adapter.complete(hi())
            assert r.server.requests[0].wire_bytes > len(r.server.requests[0].body)
            assert endpoint_for(r.server, "openai").host == f"127.0.0.1:{r.server.port}"

    trio.run(main)
