"""A WeChat pending message as kernel state keeps it (docs/adr/0037): its
text sealed under the sender's subject key (the owner's one subject for the
bound owner), opened back whole, read as forgotten once that key is gone
while another user's still opens."""

from __future__ import annotations

import tempfile

from naga.v1 import sealed_pb2 as slpb
from naga.v1 import wechat_pb2 as wpb
from naga_core._home import Home
from naga_core.memory import BLOB_MAGIC, FORGOTTEN, OWNER_SUBJECT, KeyRing, Sealer
from naga_core.wechat import peer_of
from naga_core.wechat._sealed import loaded, stored, subject_of_user

CANARY = "zq5wechat-pending-canary"


def _pending(user: str, *, owner: bool) -> wpb.WechatPending:
    return wpb.WechatPending(
        bot_id="b1", user_id=user, session="wx-s", key="k-" + user, text=CANARY, owner=owner
    )


def test_pending_text_is_sealed_per_sender_and_forgotten_with_its_key() -> None:
    ring = KeyRing.of_home(Home(tempfile.mkdtemp(prefix="naga-wx-seal-")))
    sealer = Sealer(ring)
    alice, owner = _pending("alice", owner=False), _pending("me", owner=True)
    kept = {p.user_id: stored(sealer, p) for p in (alice, owner)}
    for raw in kept.values():
        assert CANARY.encode() not in raw
    assert subject_of_user("b1", "me", owner=True) == OWNER_SUBJECT
    assert subject_of_user("b1", "alice", owner=False) == peer_of("b1", "alice")
    assert loaded(sealer, kept["alice"]) == alice
    assert loaded(sealer, kept["me"]) == owner
    ring.destroy(peer_of("b1", "alice"))
    gone = loaded(sealer, kept["alice"])
    assert gone.text == FORGOTTEN
    assert (gone.key, gone.session) == (alice.key, alice.session)
    assert loaded(sealer, kept["me"]) == owner


def test_a_pending_message_with_no_text_is_kept_as_it_is() -> None:
    sealer = Sealer(KeyRing.of_home(Home(tempfile.mkdtemp(prefix="naga-wx-seal-"))))
    empty = wpb.WechatPending(bot_id="b1", user_id="u", key="k", sent=2)
    assert stored(sealer, empty) == empty.SerializeToString()
    assert loaded(sealer, stored(sealer, empty)) == empty


def test_a_blobs_subject_is_its_sealers_and_a_relabelled_box_does_not_open() -> None:
    # wechat.send_file trusts the subject a stored box names (ADR 0041):
    # one relabelled to another user's must not open under that user's key.
    sealer = Sealer(KeyRing.of_home(Home(tempfile.mkdtemp(prefix="naga-wx-seal-"))))
    alice, bob = peer_of("b1", "alice"), peer_of("b1", "bob")
    sealer.seal_blob(bob, b"bob's key exists too")
    sealed = sealer.seal_blob(alice, CANARY.encode())
    assert sealer.blob_subject(sealed) == alice
    assert sealer.blob_subject(CANARY.encode()) is None
    box = slpb.SealedBox.FromString(sealed[len(BLOB_MAGIC) :])
    box.subject = bob
    relabelled = BLOB_MAGIC + box.SerializeToString()
    assert sealer.blob_subject(relabelled) == bob
    assert sealer.open_blob(relabelled) is None
    assert sealer.open_blob(sealed) == CANARY.encode()
