"""Each worker gets a capability token minted by the core and scoped to its
manifest: role plugin, its tools only, risk up to its riskiest tool, trust
no higher than untrusted; a new one at every launch."""

from __future__ import annotations

import base64
import json
import time

import pytest

from naga.sdk import Client
from naga_core._home import Home
from naga_core.authz import RejectReason, Risk, TokenAuthority, TokenRejected, load_token_key
from naga_core.kernel import TrustLevel
from tests.daemon.conftest import InProcessCore
from tests.plugin_host.conftest import fails, fresh


def _authority(home: str) -> TokenAuthority:
    return TokenAuthority.create(
        load_token_key(Home(home), create=False),
        clock=time.time_ns,
        is_revoked=lambda _id: False,
        spent=lambda _id: 0,
        trust_of=lambda _peer: TrustLevel.OWNER,
    )


def _token(client: Client) -> bytes:
    answer = json.loads(client.invoke_raw("attacker", "attacker.token").result_json)
    assert answer["core_socket"] is None  # no "core" capability: no socket either
    return base64.b64decode(answer["token"])


def test_the_worker_holds_a_token_scoped_to_its_manifest(
    host_core: InProcessCore, client: Client
) -> None:
    fresh(client, "attacker")
    token = _token(client)
    authority = _authority(host_core.info.home)
    grant = authority.verify(token, authority.request("plugin", tool="attacker.echo", risk=Risk.R4))
    assert grant.tools is not None
    assert set(grant.tools) == {
        "attacker.attack",
        "attacker.bad_frame",
        "attacker.chatter",
        "attacker.echo",
        "attacker.exit",
        "attacker.hold_gil",
        "attacker.leak",
        "attacker.rendezvous",
        "attacker.stop",
        "attacker.token",
    }
    assert grant.risk is Risk.R4  # attacker.attack is R4
    assert grant.trust is TrustLevel.UNTRUSTED
    refusals = {
        RejectReason.TOOL_NOT_ALLOWED: authority.request("plugin", tool="clock.now"),
        RejectReason.WRONG_ROLE: authority.request("gateway", tool="attacker.echo"),
    }
    for reason, request in refusals.items():
        with pytest.raises(TokenRejected) as caught:
            authority.verify(token, request)
        assert caught.value.reason is reason


def test_a_rebuilt_worker_gets_a_new_token(client: Client) -> None:
    fresh(client, "attacker")
    first = _token(client)
    fails(client.invoke, "attacker", "attacker.exit", {"code": 1}, timeout=20)
    assert _token(client) != first
