"""Sealed skills (docs/adr/0060-seal17-sealed-skills.md): a session's or
peer's skills are sealed under its subject's key, their names in kernel
state are keyed ids; a forget makes them unreadable and lists them as
forgotten, and leaves every other subject's skills as they were."""

from __future__ import annotations

import os
import re
import tempfile
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from naga_core import skills
from naga_core._home import Home
from naga_core.kernel import replay
from naga_core.memory import FORGOTTEN, UNREADABLE, KeyRing, Sealer, is_sealed_blob, load_master
from naga_core.skills import (
    NAME_KEY_LABEL,
    REF_FAMILY,
    Library,
    SkillNotFound,
    SkillStore,
    keyed_name,
)
from tests.canary_helpers import files_holding, forms
from tests.skills.helpers import open_store, skill_files

ALICE, BOB = "webchat:alice", "webchat:bob"


def _secret_skill(store: SkillStore, scope: str, canary: str, subject: str) -> None:
    store.create(
        scope,
        skill_files(
            f"{canary}-steps",
            f"Steps for {canary}. Use when a task mentions {canary}.",
            f"1. Say {canary}.\n",
        ),
        author="agent",
        reason=f"distilled: {canary}",
        subject=subject,
    )


def test_a_peers_skill_is_sealed_and_named_by_a_keyed_id_only() -> None:
    canary = "zq7skill" + uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as d:
        with open_store(d, sealed=True) as store:
            _secret_skill(store, f"peer/{ALICE}", canary, ALICE)
            (ref,) = store.refs()
            assert (ref.scope, ref.name, ref.forgotten) == (
                f"peer/{ALICE}",
                f"{canary}-steps",
                False,
            )
            version = store.version(ref.commit)
            assert version.subject == ALICE
            assert canary in store.doc(version).body
            assert store.need(f"peer/{ALICE}", f"{canary}-steps") == ref
            # Every object is a sealed blob, addressed over its ciphertext.
            for digest in (
                ref.commit,
                version.commit.tree,
                *(e.blob for e in version.tree.entries),
            ):
                assert is_sealed_blob(store.blobs.get(digest))
            key = next(iter(store.kernel.state.family(REF_FAMILY)))
            assert key == ref.key
            assert key.startswith(f"peer/{ALICE}/~")
            store.kernel.ledger.commit()
            for record in store.kernel.ledger.iter_records():
                assert not any(f in record.payload for f in forms(canary)), record.kind
        # Nothing on disk holds the name, the description, the body or the reason.
        assert files_holding(d, forms(canary)) == []


def test_the_owners_global_skills_stay_plaintext() -> None:
    with tempfile.TemporaryDirectory() as d, open_store(d, sealed=True) as store:
        files = skill_files("csv-totals", "Sum a column. Use when a CSV needs a total.", "Sum.\n")
        ref = store.create("global", files, author="owner", reason="import")
        assert ref.key == "global/csv-totals"
        assert store.blobs.get(ref.commit).startswith(b"naga.skill.commit/1\n")
        assert store.files(store.version(ref.commit)) == files


@settings(max_examples=25, deadline=None)
@given(
    st.from_regex(r"[a-z0-9]{1,10}(-[a-z0-9]{1,8}){0,2}", fullmatch=True),
    st.sampled_from(("session/s1", f"peer/{ALICE}")),
)
def test_keyed_names_are_stable_per_subject_and_differ_across_subjects(
    name: str, scope: str
) -> None:
    with tempfile.TemporaryDirectory() as d:
        home = Home(d)
        one = Sealer(KeyRing.of_home(home))
        again = Sealer(KeyRing(home, load_master(home, create=False)))  # a restart
        a1 = one.derived_key(ALICE, NAME_KEY_LABEL, create=True)
        b1 = one.derived_key(BOB, NAME_KEY_LABEL, create=True)
        a2 = again.derived_key(ALICE, NAME_KEY_LABEL, create=False)
        assert a1 is not None
        assert b1 is not None
        assert a2 is not None
        assert keyed_name(a1, scope, name) == keyed_name(a2, scope, name)
        assert keyed_name(a1, scope, name) != keyed_name(b1, scope, name)
        assert keyed_name(a1, scope, name) != keyed_name(a1, scope, name + "x")
        assert re.fullmatch(r"~[0-9a-f]{32}", keyed_name(a1, scope, name))  # nothing of the name
        # Another use's key is another key.
        other = one.derived_key(ALICE, b"naga-other-use v1", create=False)
        assert other is not None
        assert other != a1


def test_after_a_forget_its_skills_list_as_forgotten_and_are_never_offered() -> None:
    with tempfile.TemporaryDirectory() as d:
        ring = KeyRing.of_home(Home(d))
        with open_store(d, ring=ring) as store:
            _forget_one_keep_the_other(store, ring)
    assert not os.path.exists(d)


def _forget_one_keep_the_other(store: SkillStore, ring: KeyRing) -> None:
    """Two peers' skills of one name; one peer forgotten."""
    library = Library(store)
    for who in (ALICE, BOB):
        store.create(
            f"peer/{who}",
            skill_files(
                "bike-repair", "Fix a flat tyre. Use when a bike tyre is flat.", "Patch it.\n"
            ),
            author="agent",
            reason="learned",
            subject=who,
        )
    keys = {r.scope: r.key for r in store.refs()}
    assert keys[f"peer/{ALICE}"].rpartition("/")[2] != keys[f"peer/{BOB}"].rpartition("/")[2]
    offer = library.offer("s1", ALICE, "my bike tyre is flat", most=3, cap_tokens=500)
    assert [o.key for o in offer.skills] == [keys[f"peer/{ALICE}"]]

    assert store.sealer is not None
    ring.destroy(ALICE)  # what memory's forget does

    listed = {r.scope: r for r in store.refs()}
    gone = listed[f"peer/{ALICE}"]
    assert (gone.name, gone.forgotten, gone.key) == (FORGOTTEN, True, keys[f"peer/{ALICE}"])
    assert store.ref(f"peer/{ALICE}", "bike-repair") is None
    try:
        store.find("bike-repair", [f"peer/{ALICE}"])
        raise AssertionError("a forgotten skill was found")
    except SkillNotFound:
        pass
    assert library.offer("s1", ALICE, "my bike tyre is flat", most=3, cap_tokens=500).skills == ()
    # The other subject's skill still reads and is still offered.
    assert listed[f"peer/{BOB}"].name == "bike-repair"
    bob = library.offer("s2", BOB, "my bike tyre is flat", most=3, cap_tokens=500)
    assert [o.name for o in bob.skills] == ["bike-repair"]
    # A new skill of the same name after the forget is a new one (new key).
    _secret_skill(store, f"peer/{ALICE}", "again", ALICE)
    assert store.need(f"peer/{ALICE}", "again-steps").key not in keys.values()
    store.kernel.ledger.commit()
    assert replay(store.kernel.ledger).family(REF_FAMILY) == store.kernel.state.family(REF_FAMILY)


def test_the_markers_are_memorys() -> None:
    assert (skills.FORGOTTEN, skills.UNREADABLE) == (FORGOTTEN, UNREADABLE)


@settings(max_examples=30, deadline=None)
@given(st.text(max_size=300), st.text(min_size=1, max_size=20))
def test_a_sealed_detail_opens_in_its_record_only_and_not_after_a_forget(
    text: str, turn: str
) -> None:
    with tempfile.TemporaryDirectory() as d:
        ring = KeyRing.of_home(Home(d))
        sealer = Sealer(ring)
        box = sealer.seal_text(ALICE, text, "skill.turn", "s1", turn)
        assert sealer.open_text(box, "skill.turn", "s1", turn) == text
        # Moved into another record, it does not open.
        assert sealer.open_text(box, "skill.turn", "s1", turn + "x") == UNREADABLE
        ring.destroy(ALICE)
        assert sealer.open_text(box, "skill.turn", "s1", turn) == FORGOTTEN
