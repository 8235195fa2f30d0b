"""The plugin's iLink client against the fake server over real HTTP (no
sandbox here: the client and its parsing; the sandboxed plugin through the
core is tests/wechat/test_channel.py): login, the held long poll, cursor
and redelivery, sends and their limits, typing, and bad answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest

from naga.v1 import wechat_pb2 as wpb
from naga_plugins.wechat._ilink import MAX_ANSWER_BYTES, ILink
from tests.fakes.ilink import ILinkThread, Response, ilink_thread

F = wpb.WechatFailure


@pytest.fixture
def fake() -> Iterator[ILinkThread]:
    with ilink_thread(hold_s=0.5) as thread:
        yield thread


@pytest.fixture
def client() -> Iterator[ILink]:
    c = ILink(httpx.HTTPTransport(retries=0))
    yield c
    c.close()


def account(fake: ILinkThread, owner: str = "owner@im.wechat") -> wpb.WechatAccount:
    bot = fake.run(fake.server.account, owner)
    return wpb.WechatAccount(
        bot_id=bot.bot_id, token=bot.token, base_url=fake.server.base, cdn_base=fake.server.cdn
    )


def test_qr_login_wait_scanned_code_confirmed(fake: ILinkThread, client: ILink) -> None:
    got = client.qr(wpb.WechatQrRequest(api_base=fake.server.base))
    assert got.status == "wait"
    assert got.qrcode
    assert got.url.startswith("https://")
    poll = wpb.WechatQrRequest(api_base=fake.server.base, qrcode=got.qrcode, timeout_ms=5000)
    assert client.qr(poll).status == "wait"  # held hold_s, then wait
    fake.run(fake.server.scan, got.qrcode)
    assert client.qr(poll).status == "scaned"
    fake.run(fake.server.ask_code, got.qrcode, "42")
    assert client.qr(poll).status == "need_verifycode"
    wrong = wpb.WechatQrRequest(api_base=fake.server.base, qrcode=got.qrcode, verify_code="41")
    assert client.qr(wrong).status == "need_verifycode"
    right = wpb.WechatQrRequest(
        api_base=fake.server.base, qrcode=got.qrcode, verify_code="42", timeout_ms=5000
    )
    assert client.qr(right).status == "scaned"
    bot = fake.run(fake.server.confirm, got.qrcode, "me@im.wechat")
    done = client.qr(poll)
    assert (done.status, done.bot_id, done.bot_token, done.user_id) == (
        "confirmed",
        bot.bot_id,
        bot.token,
        "me@im.wechat",
    )
    assert done.base_url == fake.server.base


def test_the_long_poll_is_held_then_delivers_and_the_old_cursor_redelivers(
    fake: ILinkThread, client: ILink
) -> None:
    acct = account(fake)
    empty = client.poll(wpb.WechatPollRequest(account=acct, timeout_ms=5000))
    assert empty.failure == F.WECHAT_FAILURE_UNSPECIFIED
    assert not empty.messages
    assert empty.next_timeout_ms == 500
    result: list[wpb.WechatPollResult] = []
    req = wpb.WechatPollRequest(account=acct, cursor=empty.cursor, timeout_ms=5000)
    waiting = threading.Thread(target=lambda: result.append(client.poll(req)))
    waiting.start()
    fake.until(lambda s: s.bots[acct.bot_id].polls >= 2)
    sent = fake.run(fake.server.user_says, acct.bot_id, "u1@im.wechat", "hello")
    waiting.join(10)
    (got,) = result
    (msg,) = got.messages
    assert msg.items[0].text == "hello"
    assert msg.message_id == str(sent["message_id"])
    assert int(msg.message_id) > 2**53
    assert msg.context_token == sent["context_token"]
    again = client.poll(req)  # the old cursor: delivered again
    assert [m.message_id for m in again.messages] == [msg.message_id]
    after = client.poll(wpb.WechatPollRequest(account=acct, cursor=got.cursor, timeout_ms=5000))
    assert not after.messages


def test_sends_need_the_context_token_and_stop_after_ten(fake: ILinkThread, client: ILink) -> None:
    acct = account(fake)
    inbound = fake.run(fake.server.user_says, acct.bot_id, "u@im.wechat", "hi")
    token = inbound["context_token"]

    def send(i: int, ctx: str = token) -> wpb.WechatCallResult:
        return client.send(
            wpb.WechatSendRequest(
                account=acct,
                to_user_id="u@im.wechat",
                context_token=ctx,
                client_id=f"c{i}",
                text="r",
            )
        )

    assert send(0, "").failure == F.WECHAT_FAILURE_REFUSED
    assert send(0, "").code == -2
    for i in range(10):
        assert send(i).failure == F.WECHAT_FAILURE_UNSPECIFIED
    eleventh = send(10)
    assert (eleventh.failure, eleventh.code) == (F.WECHAT_FAILURE_REFUSED, -2)
    assert send(3).failure == F.WECHAT_FAILURE_UNSPECIFIED  # same client_id: idempotent
    assert len(fake.server.sent) == 10
    fake.run(fake.server.expire_context, token)
    other = fake.run(fake.server.user_says, acct.bot_id, "u@im.wechat", "again")
    assert send(11).code == -2  # the old token is past its window
    assert send(12, other["context_token"]).failure == F.WECHAT_FAILURE_UNSPECIFIED


def test_a_revoked_token_is_stale_everywhere(fake: ILinkThread, client: ILink) -> None:
    acct = account(fake)
    fake.run(fake.server.revoke, acct.bot_id)
    polled = client.poll(wpb.WechatPollRequest(account=acct, timeout_ms=3000))
    assert (polled.failure, polled.code) == (F.WECHAT_FAILURE_STALE, -14)
    typing = client.typing(wpb.WechatTypingRequest(account=acct, to_user_id="u", status=1))
    assert typing.failure == F.WECHAT_FAILURE_STALE


def test_typing_gets_a_ticket_once_and_records_the_timeline(
    fake: ILinkThread, client: ILink
) -> None:
    acct = account(fake)
    for status in (1, 1, 2):
        got = client.typing(wpb.WechatTypingRequest(account=acct, to_user_id="u", status=status))
        assert got.failure == F.WECHAT_FAILURE_UNSPECIFIED, got
    assert [t.status for t in fake.server.typing] == [1, 1, 2]
    paths = [r.path for r in fake.server.requests]
    assert paths.count("/ilink/bot/getconfig") == 1


@pytest.mark.parametrize(
    ("response", "words"),
    [
        (Response(body=b"{not json"), "not JSON"),
        (Response(body=b"[1, 2]"), "JSON list, not an object"),
        (Response(body=json.dumps({"ret": 0, "msgs": "no"}).encode()), "msgs is str"),
        (Response(body=json.dumps({"ret": "zero"}).encode()), "ret is str"),
        (Response(body=b" " * (MAX_ANSWER_BYTES + 10)), "larger than 4 MiB"),
        (
            Response(302, headers=(("location", "http://evil.example/x"),)),
            "redirect to 'evil.example'",
        ),
        (Response(524, b"cloudflare"), "HTTP 524"),
    ],
)
def test_bad_answers_are_clear_failures(
    fake: ILinkThread, client: ILink, response: Response, words: str
) -> None:
    acct = account(fake)
    fake.run(fake.server.inject, "getupdates", response)
    got = client.poll(wpb.WechatPollRequest(account=acct, timeout_ms=3000))
    assert got.failure == F.WECHAT_FAILURE_BAD_RESPONSE
    assert words in got.detail
    fake.run(fake.server.user_says, acct.bot_id, "u", "still fine")
    assert client.poll(wpb.WechatPollRequest(account=acct, timeout_ms=3000)).messages


def test_a_malformed_message_is_skipped_and_the_rest_of_the_batch_counts(
    fake: ILinkThread, client: ILink
) -> None:
    acct = account(fake)
    body = {
        "ret": 0,
        "get_updates_buf": "c1",
        "msgs": [
            {"message_id": 1, "from_user_id": "u", "item_list": "nope"},
            {
                "message_id": 2,
                "from_user_id": "u",
                "item_list": [{"type": 1, "text_item": {"text": 5}}],
            },
            {
                "message_id": "3",
                "from_user_id": "u",
                "item_list": [{"type": 1, "text_item": {"text": "ok"}}],
            },
        ],
    }
    fake.run(fake.server.inject, "getupdates", Response(body=json.dumps(body).encode()))
    got = client.poll(wpb.WechatPollRequest(account=acct, timeout_ms=3000))
    assert [m.message_id for m in got.messages] == ["3"]
    assert got.cursor == "c1"
    assert len(got.skipped) == 2
    assert "item_list is str" in got.skipped[0]
