"""The memory key hierarchy (docs/adr/0026-memory-key-hierarchy.md) as
properties: every wrap unwraps and every seal opens; any flipped bit of a
ciphertext or a wrapped key, and any other associated data (item id,
subject, key id), is refused; forgetting one subject leaves every other
subject's items readable, through a reopened key ring too; and random
writes, forgets and restarts of the store agree with a model of it."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga.trust import TrustLevel
from naga.v1 import memory_pb2 as mmpb
from naga_core._home import Home
from naga_core._store import open_ledger
from naga_core.kernel import Actions, Kernel
from naga_core.memory import (
    KeyRing,
    MemoryKeyError,
    MemoryStore,
    Source,
    load_master,
    master_key_path,
    open_item,
    seal_item,
    subject_key_path,
    unwrap_kek,
    wrap_kek,
)

KEYS = st.binary(min_size=32, max_size=32)
NAMES = st.text(min_size=1, max_size=40)
TEXTS = st.binary(max_size=600)


def _flip(data: bytes, at: int, bit: int) -> bytes:
    i = at % len(data)
    return data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1 :]


@given(master=KEYS, kek=KEYS, subject=NAMES, kek_id=NAMES)
def test_a_wrapped_subject_key_unwraps_to_itself(
    master: bytes, kek: bytes, subject: str, kek_id: str
) -> None:
    assert unwrap_kek(master, wrap_kek(master, kek, subject, kek_id), subject, kek_id) == kek


@given(kek=KEYS, item=NAMES, subject=NAMES, text=TEXTS)
def test_a_sealed_item_opens_to_its_text(kek: bytes, item: str, subject: str, text: bytes) -> None:
    wrapped, box = seal_item(kek, item, subject, text)
    assert open_item(kek, item, subject, wrapped, box) == text
    assert len(text) < 16 or text not in box  # (a short one may occur by chance)


@given(
    kek=KEYS,
    item=NAMES,
    subject=NAMES,
    text=TEXTS,
    at=st.integers(min_value=0),
    bit=st.integers(0, 7),
    which=st.sampled_from(["wrapped", "box"]),
)
def test_any_flipped_bit_of_a_wrapped_key_or_ciphertext_is_refused(
    *, kek: bytes, item: str, subject: str, text: bytes, at: int, bit: int, which: str
) -> None:
    wrapped, box = seal_item(kek, item, subject, text)
    if which == "wrapped":
        wrapped = _flip(wrapped, at, bit)
    else:
        box = _flip(box, at, bit)
    with pytest.raises(MemoryKeyError):
        open_item(kek, item, subject, wrapped, box)


@given(
    kek=KEYS,
    item=NAMES,
    subject=NAMES,
    other=NAMES,
    text=TEXTS,
    which=st.sampled_from(["item", "subject"]),
)
def test_other_associated_data_is_refused(
    *, kek: bytes, item: str, subject: str, other: str, text: bytes, which: str
) -> None:
    wrapped, box = seal_item(kek, item, subject, text)
    moved_item, moved_subject = (other, subject) if which == "item" else (item, other)
    if (moved_item, moved_subject) == (item, subject):
        return
    with pytest.raises(MemoryKeyError):
        open_item(kek, moved_item, moved_subject, wrapped, box)


@given(
    master=KEYS,
    kek=KEYS,
    subject=NAMES,
    kek_id=NAMES,
    other=NAMES,
    at=st.integers(min_value=0),
    bit=st.integers(0, 7),
)
def test_a_wrapped_subject_key_refuses_tampering_another_subject_or_id(
    *, master: bytes, kek: bytes, subject: str, kek_id: str, other: str, at: int, bit: int
) -> None:
    box = wrap_kek(master, kek, subject, kek_id)
    with pytest.raises(MemoryKeyError):
        unwrap_kek(master, _flip(box, at, bit), subject, kek_id)
    if other != subject:
        with pytest.raises(MemoryKeyError):
            unwrap_kek(master, box, other, kek_id)
    if other != kek_id:
        with pytest.raises(MemoryKeyError):
            unwrap_kek(master, box, subject, other)


@given(kek=KEYS, wrong=KEYS, text=TEXTS)
def test_another_subjects_key_opens_nothing(kek: bytes, wrong: bytes, text: bytes) -> None:
    if kek == wrong:
        return
    wrapped, box = seal_item(kek, "mi-1", "webchat:owner", text)
    with pytest.raises(MemoryKeyError):
        open_item(wrong, "mi-1", "webchat:owner", wrapped, box)


SUBJECTS = st.lists(
    st.sampled_from(["webchat:owner", "wechat:b1/alice", "wechat:b1/bob", "webchat:guest-1"]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25, deadline=None)
@given(writes=SUBJECTS, forget=st.sampled_from(["webchat:owner", "wechat:b1/alice", "x:none"]))
def test_forgetting_one_subject_never_touches_another(writes: list[str], forget: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        home = Home(os.path.join(root, "home"))
        home.ensure()
        ring = KeyRing.of_home(home)
        sealed: list[tuple[str, str, bytes, bytes, bytes]] = []
        for n, subject in enumerate(writes):
            _kid, kek = ring.ensure(subject)
            text = f"item {n} of {subject}".encode()
            sealed.append((f"mi-{n}", subject, text, *seal_item(kek, f"mi-{n}", subject, text)))
        ring.destroy(forget)
        assert not os.path.exists(subject_key_path(home, forget))
        # A fresh ring (a restart) reads the keys from disk, not a cache.
        for ring_now in (ring, KeyRing.of_home(home)):
            for item, subject, text, wrapped, box in sealed:
                got = ring_now.current(subject)
                if subject == forget:
                    assert got is None
                    continue
                assert got is not None
                assert open_item(got[1], item, subject, wrapped, box) == text


def test_key_files_are_private_and_loose_ones_refused() -> None:
    with tempfile.TemporaryDirectory() as root:
        home = Home(os.path.join(root, "home"))
        home.ensure()
        ring = KeyRing.of_home(home)
        ring.ensure("webchat:owner")
        for path in (master_key_path(home), subject_key_path(home, "webchat:owner")):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert load_master(home, create=True) == load_master(home, create=False)
        os.chmod(subject_key_path(home, "webchat:owner"), 0o644)
        with pytest.raises(MemoryKeyError, match="must be 0600"):
            KeyRing.of_home(home).current("webchat:owner")
        os.chmod(master_key_path(home), 0o640)
        with pytest.raises(MemoryKeyError, match="must be 0600"):
            load_master(home, create=False)


def test_a_subject_key_under_another_master_is_refused() -> None:
    with tempfile.TemporaryDirectory() as root:
        home = Home(os.path.join(root, "home"))
        home.ensure()
        KeyRing.of_home(home).ensure("webchat:owner")
        with pytest.raises(MemoryKeyError, match="does not authenticate"):
            KeyRing(home, os.urandom(32)).current("webchat:owner")


OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "write", "forget", "reopen"]),
        st.sampled_from(["webchat:owner", "wechat:b1/alice", "wechat:b1/bob"]),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=20, deadline=None)
@given(ops=OPS)
def test_random_writes_forgets_and_restarts_keep_each_subject_to_itself(
    ops: list[tuple[str, str]],
) -> None:
    """A model of the store: an item is readable iff no forget of its subject
    came after it; a subject's search finds only its own readable items;
    a restart (the index rebuilt from the ledger) changes nothing."""
    with tempfile.TemporaryDirectory() as root:
        home = Home(os.path.join(root, "home"))
        home.ensure()
        readable: dict[str, tuple[str, str]] = {}  # item id -> (subject, text)
        gone: set[str] = set()
        with open_ledger(home, create=True) as ledger:
            kernel = Kernel.open(ledger, Actions())
        for n, (op, subject) in enumerate(ops):
            with open_ledger(home, create=False) as ledger:
                kernel = Kernel.open(ledger, Actions())
                store = MemoryStore.over(KeyRing.of_home(home), kernel)
                for record in ledger.iter_records():
                    store.see(record)
                if op == "write":
                    text = f"fact {n} zebra about {subject}"
                    with kernel.staged():
                        item = store.write(
                            ledger,
                            kernel,
                            subject=subject,
                            layer=mmpb.MEMORY_LAYER_SEMANTIC,
                            text=text,
                            source=Source("s", "t", TrustLevel.OWNER),
                        )
                    readable[item.id] = (subject, text)
                elif op == "forget":
                    with kernel.staged():
                        store.forget(ledger, kernel, subject)
                    for item_id in [i for i, (s, _t) in readable.items() if s == subject]:
                        gone.add(item_id)
                        del readable[item_id]
                ledger.commit()
                for who in ("webchat:owner", "wechat:b1/alice", "wechat:b1/bob"):
                    found = store.search(who, "zebra", 100)
                    assert {i.id for i in found} == {
                        i for i, (s, _t) in readable.items() if s == who
                    }
                for item_id, (_s, text) in readable.items():
                    assert store.get(item_id).text == text
                for item_id in gone:
                    assert store.get(item_id).text is None
