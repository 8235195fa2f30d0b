"""Every RPC of a real core (in this process, on its real socket) through the SDK."""

from __future__ import annotations

import base64
import os
import stat
import threading

import grpc
import pytest
import trio

from naga.constants import MAX_RPC_REQUEST_BYTES
from naga.sdk import Client, errors
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga_core._home import Home
from naga_core._store import verifier_for
from naga_core.daemon import CoreAlreadyRunning, CoreConfig, serve_core
from naga_core.ledger import leaf_hash, verify_consistency, verify_inclusion
from tests.daemon.conftest import core_in_thread


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_run_files_are_private_and_go_away_on_shutdown(home: str) -> None:
    with core_in_thread(home) as core:
        run = os.path.join(home, "run")
        assert _mode(run) == 0o700
        assert stat.S_ISSOCK(os.stat(core.info.socket).st_mode)
        assert _mode(core.info.socket) == 0o600
        assert not os.path.exists(os.path.join(run, ".core.sock"))  # bound there, then renamed
        assert _mode(os.path.join(run, "owner.token")) == 0o600
        assert os.path.getsize(os.path.join(run, "owner.token")) == 32
        with open(os.path.join(run, "core.pid")) as f:
            assert int(f.read()) == os.getpid()
        with core.client() as c:
            c.shutdown("test")
        assert core.join().reason == "Shutdown by owner: test"
        assert sorted(os.listdir(run)) == ["core.lock"]


def test_a_second_core_on_the_same_home_is_refused_naming_the_first(home: str) -> None:
    with core_in_thread(home) as core:
        with pytest.raises(CoreAlreadyRunning, match=rf"pid {os.getpid()}"):
            trio.run(serve_core, CoreConfig(Home(home)))
        # The refused one touched nothing: the first still serves.
        with core.client() as c:
            assert c.status().processes[0].pid == os.getpid()


def test_ledger_service(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        empty = c.head()
        assert empty.size == 0
        for v in (30, 31, 32):
            c.set_setting("agent.max_steps", v)
        head = c.head()
        assert head.size == 3
        assert head.last_seq == 2
        assert head.checkpoint.splitlines()[1] == "3"
        records = c.records(0)
        assert [r.seq for r in records] == [0, 1, 2]
        assert all(r.kind == "kernel.effect" for r in records)
        assert records[1].prev_hash == records[0].leaf_hash
        assert [r.seq for r in c.records(1, limit=1)] == [1]
        assert c.records(3) == []
        proof = c.prove_inclusion(1)
        assert leaf_hash(proof.record_body) == proof.leaf_hash == records[1].leaf_hash
        verify_inclusion(proof.leaf_hash, 1, 3, list(proof.path), head.root)  # raises if not
        assert proof.key_name == verifier_for(Home(home)).key_name
        cons = c.prove_consistency(1, 3)
        assert cons.new_root == head.root
        verify_consistency(1, 3, cons.old_root, cons.new_root, list(cons.path))
        with pytest.raises(errors.OutOfRange, match="seq 3 is past the ledger's end"):
            c.prove_inclusion(3)
        with pytest.raises(errors.InvalidArgument, match="0 < old_size <= new_size"):
            c.prove_consistency(0, 2)
        with pytest.raises(errors.OutOfRange, match="new_size 9"):
            c.prove_consistency(1, 9)
        assert c.records(4) == []  # past the head: empty, as the contract says
        with pytest.raises(errors.InvalidArgument, match="limit 1001 is above the maximum"):
            c.records(0, limit=1001)


def test_subscribe_sends_the_backlog_then_live_records_filtered_by_kind(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        c.set_setting("agent.max_steps", 30)
        sub = c.subscribe(0, kinds=["kernel.effect"])
        events = iter(sub)
        first = next(events)
        assert first.record.seq == 0
        assert next(events).caught_up.next_seq == 1
        c.set_trust("wechat:bob", "known", by_owner=True)
        live = next(events)
        assert live.record.seq == 1
        assert live.record.kind == "kernel.effect"
        assert next(events).caught_up.next_seq == 2
        sub.cancel()
        assert list(events) == []
        # A kind nobody writes: only the caught-up marks arrive.
        quiet = iter(c.subscribe(0, kinds=["nobody.writes.this"]))
        assert next(quiet).caught_up.next_seq == 2
        with pytest.raises(errors.OutOfRange):
            next(iter(c.subscribe(5)))
        with pytest.raises(errors.InvalidArgument, match="printable ASCII without spaces"):
            next(iter(c.subscribe(0, kinds=["has space"])))


def test_subscribe_sends_only_the_effect_families_asked_and_is_quiet_between(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        c.set_setting("agent.max_steps", 30)  # 0: the setting family
        c.set_trust("wechat:bob", "known", by_owner=True)  # 1: another family
        sub = c.subscribe(
            0, kinds=["kernel.effect"], effect_families=["setting"], caught_up_after_records=True
        )
        events = iter(sub)
        assert next(events).record.seq == 0
        assert next(events).caught_up.next_seq == 2  # told once at the start
        c.set_trust("wechat:carol", "known", by_owner=True)  # 2: neither sent nor told
        c.set_setting("agent.max_steps", 31)  # 3
        assert next(events).record.seq == 3
        assert next(events).caught_up.next_seq == 4
        # A rollback may restore any family: it is sent.
        undone = c.rollback(2, by_owner=True)
        rolled = next(events)
        assert rolled.record.seq == undone.seq
        assert kpb.Effect.FromString(rolled.record.payload).form == kpb.EFFECT_FORM_ROLLBACK
        assert next(events).caught_up.next_seq == undone.seq + 1
        sub.cancel()
        assert list(events) == []
        # Unfiltered, every effect arrives, each with its caught-up mark.
        plain = iter(c.subscribe(1, kinds=["kernel.effect"]))
        assert [next(plain).record.seq, next(plain).record.seq] == [1, 2]
        with pytest.raises(errors.InvalidArgument, match="effect_families entry"):
            next(iter(c.subscribe(0, effect_families=["has space"])))
        with pytest.raises(errors.InvalidArgument, match="at most 16"):
            next(iter(c.subscribe(0, effect_families=[f"f{i}" for i in range(17)])))


def test_subscribers_are_capped_and_end_when_the_core_stops(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        subs = [iter(c.subscribe(0)) for _ in range(8)]
        for s in subs:
            assert next(s).caught_up.next_seq == 0
        with pytest.raises(errors.ResourceExhausted, match="8 streams are open"):
            next(iter(c.subscribe(0)))
        ended: list[BaseException] = []

        def drain() -> None:
            try:
                list(subs[0])
            except errors.SdkError as exc:
                ended.append(exc)

        t = threading.Thread(target=drain)
        t.start()
        c.shutdown("test")
        t.join(30)
        assert len(ended) == 1
        assert isinstance(ended[0], errors.CoreUnavailable)
        assert "shutting down" in str(ended[0])
        core.join()


def test_history_pages_newest_first_and_skips_markers(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        assert c.history().entries == []
        for v in range(1, 8):
            c.set_setting("agent.max_steps", v)
        page = c.history(limit=3)
        assert [e.seq for e in page.entries] == [6, 5, 4]
        assert page.more
        assert page.next_before_seq == 4
        rest = c.history(limit=10, before_seq=page.next_before_seq)
        assert [e.seq for e in rest.entries] == [3, 2, 1, 0]
        assert not rest.more
        e = page.entries[0]
        assert e.kind == "kernel.effect"
        assert e.form == kpb.EFFECT_FORM_REGISTER
        assert e.description == "set agent.max_steps = 7"
        assert e.timestamp_ns > 0
        assert not e.irreversible
        with pytest.raises(errors.OutOfRange, match="before_seq 99"):
            c.history(before_seq=99)
        with pytest.raises(errors.InvalidArgument, match="limit 5000"):
            c.history(limit=5000)


def test_rollback_previews_applies_and_is_itself_an_entry(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        c.set_setting("agent.max_steps", 30)  # 0
        c.set_setting("lanes.queue_mode", "steer")  # 1
        c.set_trust("wechat:bob", "known", by_owner=True)  # 2
        dry = c.rollback(0, dry_run=True)
        assert not dry.HasField("seq")
        assert dry.preview.effects == 2
        assert dry.preview.through_seq == 2
        changed = {(ch.family, ch.key): ch for ch in dry.preview.changes}
        assert changed[("setting", "lanes.queue_mode")].before.text == "steer"
        assert not changed[("setting", "lanes.queue_mode")].HasField("after")
        assert c.head().size == 3  # nothing journaled
        done = c.rollback(0)
        assert done.seq == 3
        assert c.get_setting("lanes.queue_mode").value.text == "followup"
        assert c.get_setting("agent.max_steps").value.integer == 30
        assert c.history(limit=1).entries[0].form == kpb.EFFECT_FORM_ROLLBACK
        assert c.history(limit=1).entries[0].rollback_to == 0
        # Rolling back the rollback brings trust back: a raise, the owner's call.
        with pytest.raises(errors.PermissionDenied, match="only the owner can"):
            c.rollback(2)
        assert c.rollback(2, by_owner=True).seq == 4
        assert c.get_trust("wechat:bob").level == cpb.TRUST_LEVEL_KNOWN
        with pytest.raises(errors.OutOfRange, match="to_seq 5 is past"):
            c.rollback(5)
        with pytest.raises(errors.InvalidArgument, match="use -1"):
            c.rollback(-2)
        assert c.rollback(-1).preview.to_seq == -1


def test_settings(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        s = c.get_setting("agent.max_steps")
        assert s.kind == cpb.SETTING_KIND_INTEGER
        assert s.value.integer == 25
        assert not s.explicit
        assert s.rule == "an integer in 1..100"
        r = c.set_setting("agent.max_steps", 40)
        assert r.seq == 0
        assert r.setting.value.integer == 40
        assert r.setting.explicit
        assert not c.set_setting("agent.max_steps", 40).HasField("seq")  # no-op journals nothing
        assert c.set_setting_text("model.timeout_s", "2.5").setting.value.real == 2.5
        assert c.set_setting("model.timeout_s", 3).setting.value.real == 3.0
        assert c.reset_setting("agent.max_steps").setting.value.integer == 25
        assert not c.reset_setting("agent.max_steps").HasField("seq")
        names = [x.name for x in c.list_settings()]
        assert names == sorted(names)
        assert "gateway.port" in names
        with pytest.raises(errors.InvalidArgument, match=r"must be an integer in 1\.\.100"):
            c.set_setting("agent.max_steps", 1000)
        with pytest.raises(errors.InvalidArgument, match="refused"):
            c.set_setting("agent.max_steps", True)
        with pytest.raises(errors.InvalidArgument, match="refused"):
            c.set_setting_text("agent.max_steps", "many")
        with pytest.raises(errors.NotFound, match=r"no setting named 'nope\.x'"):
            c.get_setting("nope.x")
        with pytest.raises(errors.InvalidArgument, match="name is required"):
            c.get_setting("")
        with pytest.raises(errors.InvalidArgument, match="name has 65 characters"):
            c.get_setting("a" * 65)
        with pytest.raises(errors.InvalidArgument, match="contains control characters"):
            c.set_setting_text("model.provider", "a\nb")


def test_trust(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        e = c.get_trust("wechat:bob")
        assert e.level == cpb.TRUST_LEVEL_UNTRUSTED
        assert not e.explicit
        with pytest.raises(errors.PermissionDenied, match="needs the owner"):
            c.set_trust("wechat:bob", "known")
        r = c.set_trust("wechat:bob", "known", by_owner=True, reason="met")
        assert r.seq == 0
        assert r.entry.level == cpb.TRUST_LEVEL_KNOWN
        assert r.entry.explicit
        assert c.set_trust("wechat:bob", "guest").entry.level == cpb.TRUST_LEVEL_GUEST
        assert [(x.peer, x.level) for x in c.list_trust()] == [
            ("wechat:bob", cpb.TRUST_LEVEL_GUEST)
        ]
        assert "met" in c.history(limit=2).entries[1].description
        with pytest.raises(errors.InvalidArgument, match="not <channel>:<id>"):
            c.get_trust("bob")
        with pytest.raises(errors.InvalidArgument, match="is not a trust level"):
            c.set_trust("wechat:bob", cpb.TRUST_LEVEL_UNSPECIFIED)
        with pytest.raises(errors.InvalidArgument, match="is not a trust level"):
            c.set_trust("wechat:bob", "friend")
        with pytest.raises(errors.InvalidArgument, match="reason has 501 characters"):
            c.set_trust("wechat:bob", "guest", reason="r" * 501)


def test_status(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        st = c.status()
        proc = st.processes[0]
        assert proc.role == "core"
        assert [p.role for p in st.processes[1:]] == ["executor:0", "executor:1"]
        assert proc.pid == os.getpid()
        assert proc.state == cpb.PROCESS_STATE_RUNNING
        assert proc.started_ns > 0
        assert st.socket == core.info.socket
        assert st.home == home
        assert st.ledger_size == 0


def test_credentials(home: str) -> None:
    with core_in_thread(home) as core:
        wrong = Client.connect(home, credential=b"x" * 32)
        with pytest.raises(errors.PermissionDenied, match="credential not accepted"):
            wrong.head()
        wrong.close()
        with grpc.insecure_channel("unix:" + core.info.socket) as ch:
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary(
                "/naga.v1.LedgerService/GetHead"
            )
            with pytest.raises(grpc.RpcError) as missing:
                call(b"", timeout=5)
            assert missing.value.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
            for bad in ("Bearer abc", "Naga !!!", "Naga " + base64.b64encode(b"y").decode()):
                with pytest.raises(grpc.RpcError) as refused:
                    call(b"", timeout=5, metadata=(("authorization", bad),))
                assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
        with core.client() as good:
            assert good.head().size == 0


def test_messages_above_the_limit_are_refused_before_any_handler(home: str) -> None:
    with core_in_thread(home) as core, core.client() as c:
        with pytest.raises(errors.ResourceExhausted):
            c.get_setting("a" * (MAX_RPC_REQUEST_BYTES + 1000))
        assert c.head().size == 0


def test_no_core_means_core_unavailable_with_a_hint(home: str) -> None:
    with pytest.raises(errors.CoreUnavailable, match="start it with: naga daemon start"):
        Client.connect(home)
    with core_in_thread(home) as core:
        c = core.client()
        c.shutdown()
        core.join()
        with pytest.raises(errors.CoreUnavailable, match="naga daemon start"):
            c.head()
        c.close()
