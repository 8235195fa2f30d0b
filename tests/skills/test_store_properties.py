"""The skill library's version tree under any history (issue 17): every
version stays addressable and its hash is a recomputation from its bytes;
rollback to a point restores that point's refs exactly; import then export
is the identity on the bytes."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naga_core.kernel import replay
from naga_core.memory import is_sealed_blob
from naga_core.skills import (
    REF_FAMILY,
    Commit,
    SkillError,
    SkillStore,
    Tree,
    read_dir,
    render,
    write_dir,
)
from tests.skills.helpers import open_store, skill_files

SCOPES = ("global", "session/s1", "peer/webchat:alice")
NAMES = ("csv-totals", "git-bisect", "unit-convert")

op = st.one_of(
    st.tuples(
        st.just("create"), st.sampled_from(SCOPES), st.sampled_from(NAMES), st.integers(0, 3)
    ),
    st.tuples(st.just("patch"), st.sampled_from(SCOPES), st.sampled_from(NAMES), st.integers(0, 3)),
    st.tuples(st.just("archive"), st.sampled_from(SCOPES), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("restore"), st.sampled_from(SCOPES), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("merge"), st.sampled_from(SCOPES), st.sampled_from(NAMES), st.integers(0, 8)),
    st.tuples(
        st.just("revert"), st.sampled_from(SCOPES), st.sampled_from(NAMES), st.integers(0, 5)
    ),
    st.tuples(st.just("rollback"), st.just(""), st.just(""), st.integers(0, 30)),
)


def _refs(store: SkillStore) -> list[tuple[str, str, bytes, bool, bool]]:
    return [(r.scope, r.name, r.commit, r.archived, r.pinned) for r in store.refs()]


def _stored(store: SkillStore, digest: bytes) -> bytes:
    """An object's canonical bytes, checked: its address is the SHA-256 of
    the bytes stored (a sealed scope's ciphertext), and those open to it."""
    raw = store.blobs.get(digest)
    assert hashlib.sha256(raw).digest() == digest
    if not is_sealed_blob(raw):
        return raw
    assert store.sealer is not None
    opened = store.sealer.open_blob(raw)
    assert opened is not None
    return opened


def _check_addressable(store: SkillStore, made: set[bytes]) -> None:
    for digest in made:
        raw = _stored(store, digest)
        commit = Commit.decode(raw)
        assert commit.encode() == raw  # canonical: one byte string per commit
        tree_raw = _stored(store, commit.tree)
        tree = Tree.decode(tree_raw)
        assert tree.encode() == tree_raw
        for entry in tree.entries:
            _stored(store, entry.blob)
        for parent in commit.parents:
            assert parent in made


def _apply(store: SkillStore, kind: str, scope: str, name: str, n: int) -> None:
    body = f"Step {n}: do the thing for {name}.\n"
    desc = f"What {name} is for. Use when a task needs {name} (v{n})."
    if kind == "create":
        store.create(scope, skill_files(name, desc, body), author="owner", reason="test")
    elif kind == "patch":
        store.patch(
            scope, name, skill_files(name, desc, body + "More.\n"), author="owner", reason="p"
        )
    elif kind == "archive":
        store.archive(scope, name, author="curator", reason="unused")
    elif kind == "restore":
        store.restore(scope, name, author="owner", reason="wanted")
    elif kind == "merge":
        others = [(s, name2) for s in SCOPES for name2 in NAMES if (s, name2) != (scope, name)]
        src = others[n % len(others)]
        store.merge(
            scope, name, [src], skill_files(name, desc, body), author="curator", reason="dup"
        )
    elif kind == "revert":
        log = store.log(scope, name)
        store.revert(scope, name, log[n % len(log)].digest.hex(), author="owner", reason="back")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=14), st.booleans())
def test_any_history_keeps_versions_addressable_and_rollback_restores_refs(
    ops: list[tuple[str, str, str, int]], sealed: bool
) -> None:
    """Sealed or not (session and peer scopes under their subjects' keys)."""
    with tempfile.TemporaryDirectory() as d, open_store(d, sealed=sealed) as store:
        kernel = store.kernel
        points: list[tuple[int, list[tuple[str, str, bytes, bool, bool]]]] = [(-1, [])]
        made: set[bytes] = set()
        with kernel.staged():
            for kind, scope, name, n in ops:
                if kind == "rollback":
                    seq, refs = points[n % len(points)]
                    kernel.rollback(seq)
                    assert _refs(store) == refs  # that point's refs, exactly
                else:
                    # A refusal (no such skill, exists, unchanged) moves nothing.
                    with contextlib.suppress(SkillError):
                        _apply(store, kind, scope, name, n)
                made |= {r.commit for r in store.refs()}
                made |= {v.digest for r in store.refs() for v in store.ancestry(r.commit)}
                _check_addressable(store, made)
                kernel.ledger.commit()
                points.append((kernel.ledger.size - 1, _refs(store)))
        # The refs are a function of the ledger alone.
        assert replay(kernel.ledger).family(REF_FAMILY) == kernel.state.family(REF_FAMILY)


_part = st.from_regex(r"[a-z0-9_][a-z0-9_.-]{0,12}", fullmatch=True).filter(
    lambda p: p not in (".", "..")
)
_extra = st.dictionaries(
    st.tuples(st.sampled_from(("scripts", "references", "assets")), _part).map(
        lambda t: f"{t[0]}/{t[1]}"
    ),
    st.tuples(st.binary(max_size=300), st.booleans()),
    max_size=5,
)


@settings(max_examples=40, deadline=None)
@given(
    st.from_regex(r"[a-z0-9]{1,10}(-[a-z0-9]{1,8}){0,2}", fullmatch=True),
    st.text(min_size=1, max_size=80).filter(lambda t: t.strip() != ""),
    st.text(max_size=400),
    _extra,
)
def test_import_then_export_is_the_identity_on_bytes(
    name: str, description: str, body: str, extra: dict[str, tuple[bytes, bool]]
) -> None:
    files = {"SKILL.md": render(name, description, body), **{p: b for p, (b, _) in extra.items()}}
    executable = frozenset(p for p, (_, x) in extra.items() if x)
    with tempfile.TemporaryDirectory() as d, open_store(os.path.join(d, "home")) as store:
        source = os.path.join(d, "in")
        write_dir(source, files, executable)
        read, read_x = read_dir(source)
        ref = store.create("global", read, read_x, author="owner", reason="import")
        version = store.version(ref.commit)
        out = os.path.join(d, "out")
        write_dir(out, store.files(version), version.tree.executable)
        back, back_x = read_dir(out)
        assert back == files
        assert back_x == executable
        for rel, data in files.items():
            with open(os.path.join(out, rel), "rb") as f:
                assert f.read() == data
