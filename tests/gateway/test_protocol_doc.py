"""docs/protocol/websocket.md names every method and error code the
gateway has, and the limits it enforces."""

from __future__ import annotations

from pathlib import Path

from naga_gateway import Limits
from naga_gateway import _protocol as p

DOC = (Path(__file__).resolve().parents[2] / "docs" / "protocol" / "websocket.md").read_text()


def test_every_method_is_documented() -> None:
    for method in p.METHODS:
        assert f"| `{method}` |" in DOC, method


def test_every_error_code_is_documented() -> None:
    codes = [p.BAD_FRAME, p.UNKNOWN_METHOD, p.INVALID_PARAMS, p.NOT_CONNECTED, p.FORBIDDEN]
    codes += [p.CORE, p.RATE_LIMITED, p.BUSY, p.UNSUPPORTED_VERSION]
    for code in codes:
        assert f"`{code}`" in DOC, code


def test_the_documented_limits_are_the_defaults() -> None:
    lim = Limits()
    assert lim.max_message == 8 * 1024 * 1024
    assert f"{lim.rate:g}/s sustained, bursts of {lim.burst}" in DOC
    assert f"after {lim.flood_strikes} refusals" in DOC
    assert f"{lim.max_inflight} per connection" in DOC
    assert f"{lim.connect_timeout:g} s" in DOC
