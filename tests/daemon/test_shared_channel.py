"""``Client.with_credential`` against a real core: a derived client presents
its own credential on each call over its maker's one connection (counted
from the kernel's socket table, so a second connection cannot go
unnoticed), leaves that connection open when it is closed, and reconnects
it after the core restarts."""

from __future__ import annotations

import os
import threading

import pytest

from naga.sdk import Client, errors, owner_credential
from naga.tokens import RejectReason, Risk, Token, TrustLevel
from naga.v1 import authz_pb2 as apb
from naga_plugins.executor import CoreLink
from tests.daemon.conftest import core_in_thread
from tests.daemon.token_helpers import refused, token_core, verify_offline
from tests.unix_peers import accepted_ends


def _connections(client: Client) -> set[int]:
    """The core's ends of this process's connections to it."""
    return accepted_ends(os.getpid(), client.socket)


def test_a_derived_client_presents_its_own_credential_over_the_same_connection(
    home: str,
) -> None:
    with token_core(home) as c:
        token = c.mint(session="s-1", budget=50)
        c.owner.head()
        before = _connections(c.owner)
        assert len(before) == 1
        derived = c.owner.with_credential(token)
        grant = derived.inspect().grant
        assert (grant.role, grant.session, grant.budget_remaining) == ("executor", "s-1", 50)
        with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_ROLE):
            derived.set_setting("agent.max_steps", 31)
        # the owner's calls still carry the owner credential
        assert c.owner.set_setting("agent.max_steps", 31).HasField("seq")
        assert c.owner.get_setting("agent.max_steps").value.integer == 31
        assert derived.spend(5, session="s-1").remaining == 45
        assert _connections(c.owner) == before


def test_closing_a_derived_client_leaves_the_owner_connected(home: str) -> None:
    with token_core(home) as c:
        c.owner.head()
        before = _connections(c.owner)
        with c.owner.with_credential(c.mint()) as derived:
            derived.inspect()
        c.owner.set_setting("agent.max_steps", 32)
        assert _connections(c.owner) == before
        # a derived client of a token client, presenting the owner's bytes, is the owner
        with c.holder(c.mint()) as holder:
            with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_ROLE):
                holder.set_setting("agent.max_steps", 33)
            as_owner = holder.with_credential(owner_credential(home))
            assert as_owner.set_setting("agent.max_steps", 33).seq > 0


def test_derived_clients_on_many_threads_each_present_their_own(home: str) -> None:
    with token_core(home) as c:
        c.owner.head()
        before = _connections(c.owner)
        sessions = [f"s-{i}" for i in range(4)]
        derived = {s: c.owner.with_credential(c.mint(session=s, budget=100)) for s in sessions}
        seen: dict[str, set[str]] = {s: set() for s in sessions}
        barrier = threading.Barrier(len(sessions))

        def run(session: str) -> None:
            barrier.wait()
            for _ in range(25):
                seen[session].add(derived[session].inspect().grant.session)

        threads = [threading.Thread(target=run, args=(s,)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert seen == {s: {s} for s in sessions}
        assert _connections(c.owner) == before


def test_a_derived_client_reconnects_after_the_core_restarts(home: str) -> None:
    with core_in_thread(home) as core:
        owner = core.client()
        token = owner.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1, budget=9).token
        derived = owner.with_credential(token)
        assert derived.inspect().grant.budget_remaining == 9
        first = _connections(owner)
        owner.shutdown("restart")
        core.join()
    with pytest.raises(errors.CoreUnavailable):
        derived.inspect()
    try:
        with core_in_thread(home) as core:
            # the derived client reconnects the shared channel...
            assert derived.inspect().grant.budget_remaining == 9
            again = _connections(owner)
            assert len(again) == 1
            assert again.isdisjoint(first)
            # ...and the owner uses it with the credential the new core wrote
            assert owner.inspect(token).rejection == apb.TOKEN_REJECTION_UNSPECIFIED
            owner.set_setting("agent.max_steps", 34)
            assert _connections(owner) == again
            owner.shutdown("test done")
            core.join()
    finally:
        owner.close()
    verify_offline(home)


def test_a_credential_of_another_type_is_refused_by_name(home: str) -> None:
    with token_core(home) as c:
        with pytest.raises(TypeError, match=r"naga\.tokens\.Token or bytes, not str"):
            c.owner.with_credential("secret")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not int"):
            c.owner.with_credential(3)  # type: ignore[arg-type]
        assert isinstance(c.mint(), Token)


def test_the_executor_link_keeps_one_connection_and_follows_a_new_socket(home: str) -> None:
    other_home = home + "-2"
    link = CoreLink()
    with token_core(home) as c, token_core(other_home) as d:
        first = link.client(c.owner.socket, c.mint(session="s-1"))
        assert first.inspect().grant.session == "s-1"
        opened = accepted_ends(os.getpid(), c.owner.socket)
        second = link.client(c.owner.socket, c.mint(session="s-2"))
        assert second.inspect().grant.session == "s-2"
        assert first.inspect().grant.session == "s-1"  # each turn its own token
        assert accepted_ends(os.getpid(), c.owner.socket) == opened
        # a job naming another core's socket: the link moves there
        token = d.mint(session="s-3")
        before = accepted_ends(os.getpid(), d.owner.socket)
        moved = link.client(d.owner.socket, token)
        assert moved.inspect().grant.session == "s-3"
        assert len(accepted_ends(os.getpid(), d.owner.socket) - before) == 1
        link.close()
