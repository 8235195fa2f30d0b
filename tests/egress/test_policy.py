"""The egress policy: which targets a plugin may ask for, which resolved
addresses it may be connected to, and the CONNECT head parser."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from naga_core.egress import EgressPolicy, EgressRefused, RefusalReason, forbidden, parse_head

POLICY = EgressPolicy.of(
    "wechat",
    [("ilinkai.weixin.qq.com", 443), ("Novac2c.CDN.weixin.qq.com.", 443)],
    loopback_hosts=["stand-in.test"],
)


def refused(fn: object, *args: object) -> RefusalReason:
    with pytest.raises(EgressRefused) as caught:
        fn(*args)  # type: ignore[operator]
    return caught.value.reason


def test_a_declared_host_and_port_pass_whatever_the_case_or_trailing_dot() -> None:
    assert str(POLICY.check_target("ILINKAI.weixin.qq.com", 443)) == "ilinkai.weixin.qq.com:443"
    assert str(POLICY.check_target("novac2c.cdn.weixin.qq.com.", 443)).startswith("novac2c")


def test_another_host_or_port_is_refused_with_its_reason() -> None:
    assert refused(POLICY.check_target, "example.org", 443) is RefusalReason.HOST_NOT_ALLOWED
    assert refused(POLICY.check_target, "ilinkai.weixin.qq.com", 80) is (
        RefusalReason.PORT_NOT_ALLOWED
    )
    with pytest.raises(EgressRefused, match=r"only on port\(s\) 443, not 80"):
        POLICY.check_target("ilinkai.weixin.qq.com", 80)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("172.16.5.4", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("100.64.1.1", "shared (CGNAT)"),
        ("::ffff:127.0.0.1", "loopback"),
        ("fc00::1", "private"),
    ],
)
def test_forbidden_ranges(address: str, why: str) -> None:
    assert forbidden(ipaddress.ip_address(address)) == why


def test_public_addresses_pass_and_the_forbidden_are_dropped_from_a_mixed_answer() -> None:
    target = POLICY.check_target("ilinkai.weixin.qq.com", 443)
    assert POLICY.reachable(target, ["10.0.0.1", "203.0.113.9", "8.8.8.8"]) == ["8.8.8.8"]


def test_a_name_resolving_only_to_private_addresses_is_refused_and_says_why() -> None:
    target = POLICY.check_target("ilinkai.weixin.qq.com", 443)
    with pytest.raises(EgressRefused, match=r"169\.254\.169\.254 \(link-local\)") as caught:
        POLICY.reachable(target, ["169.254.169.254", "127.0.0.1"])
    assert caught.value.reason is RefusalReason.ADDRESS_FORBIDDEN


def test_a_loopback_stand_in_reaches_loopback_only() -> None:
    policy = EgressPolicy.of("t", [("stand-in.test", 8080)], loopback_hosts=["stand-in.test"])
    target = policy.check_target("stand-in.test", 8080)
    assert policy.reachable(target, ["127.0.0.1", "8.8.8.8", "10.0.0.1"]) == ["127.0.0.1"]
    assert refused(policy.reachable, target, ["8.8.8.8"]) is RefusalReason.ADDRESS_FORBIDDEN


def test_loopback_is_refused_for_a_host_that_is_not_a_stand_in() -> None:
    policy = EgressPolicy.of("t", [("127.0.0.1", 8080)])
    target = policy.check_target("127.0.0.1", 8080)
    assert refused(policy.reachable, target, ["127.0.0.1"]) is RefusalReason.ADDRESS_FORBIDDEN


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", ("a.example", 443)),
        (b"CONNECT [::1]:8080 HTTP/1.1\r\n\r\n", ("[::1]", 8080)),
        (b"CONNECT 127.0.0.1:1 HTTP/1.0\r\n\r\n", ("127.0.0.1", 1)),
    ],
)
def test_connect_heads(head: bytes, expected: tuple[str, int]) -> None:
    assert parse_head(head) == expected


@pytest.mark.parametrize(
    "head",
    [
        b"GET http://a.example/ HTTP/1.1\r\n\r\n",
        b"CONNECT a.example HTTP/1.1\r\n\r\n",
        b"CONNECT a.example:0 HTTP/1.1\r\n\r\n",
        b"CONNECT a.example:65536 HTTP/1.1\r\n\r\n",
        b"CONNECT a.example:44x HTTP/1.1\r\n\r\n",
        b"CONNECT ::1:80 HTTP/1.1\r\n\r\n",
        b"CONNECT user@a.example:80 HTTP/1.1\r\n\r\n",
        b"CONNECT a.example:80 SPDY/3\r\n\r\n",
        "CONNECT ä.example:80 HTTP/1.1\r\n\r\n".encode(),
    ],
)
def test_bad_heads_are_refused_as_bad_requests(head: bytes) -> None:
    assert refused(parse_head, head) is RefusalReason.BAD_REQUEST


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_are_refused_as_a_bad_request(head: bytes) -> None:
    outcome: tuple[str, int] | RefusalReason
    try:
        outcome = parse_head(head)
    except EgressRefused as exc:
        outcome = exc.reason
    if isinstance(outcome, RefusalReason):
        assert outcome is RefusalReason.BAD_REQUEST
    else:
        assert outcome[0]
        assert 1 <= outcome[1] <= 65535


@given(st.ip_addresses())
def test_an_address_that_passes_is_global_and_in_no_special_range(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    if forbidden(address) is not None:
        return
    plain = getattr(address, "ipv4_mapped", None) or address
    assert plain.is_global
    for special in ("is_loopback", "is_private", "is_link_local", "is_multicast", "is_reserved"):
        assert not getattr(plain, special), special
    assert plain not in ipaddress.ip_network("100.64.0.0/10")


def test_open_hosts_pass_on_web_ports_and_still_refuse_forbidden_addresses() -> None:
    web = EgressPolicy.of("web", [], loopback_hosts=["stand-in.test"], open_hosts=["*"])
    assert str(web.check_target("Example.ORG.", 443)) == "example.org:443"
    assert str(web.check_target("example.org", 80)) == "example.org:80"
    assert refused(web.check_target, "example.org", 8080) is RefusalReason.PORT_NOT_ALLOWED
    assert str(web.check_target("stand-in.test", 8080)) == "stand-in.test:8080"
    target = web.check_target("example.org", 443)
    assert web.reachable(target, ["93.184.215.14"]) == ["93.184.215.14"]
    for address in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "::ffff:192.168.0.1"):
        assert refused(web.reachable, target, [address]) is RefusalReason.ADDRESS_FORBIDDEN
    some = EgressPolicy.of("web", [], open_hosts=["example.org", "*.example.net"])
    assert some.check_target("www.example.net", 443).host == "www.example.net"
    assert refused(some.check_target, "example.net", 443) is RefusalReason.HOST_NOT_ALLOWED
    assert refused(some.check_target, "evil.org", 443) is RefusalReason.HOST_NOT_ALLOWED
    assert refused(POLICY.check_target, "example.org", 443) is RefusalReason.HOST_NOT_ALLOWED
