"""LedgerService.GetBlob on a real core: a blob of several chunks and an
empty one arrive whole; a digest of the wrong length, an unknown one and a
corrupt blob are each refused with their own status; only the owner may
read blobs. ProveInclusion proves against an earlier tree size on request."""

from __future__ import annotations

import hashlib
import random

import pytest

from naga.constants import BLOB_CHUNK_BYTES
from naga.sdk import errors
from naga.tokens import RejectReason
from naga_core._home import Home
from naga_core._store import blob_store
from naga_core.ledger import CheckpointVerifier, verify_inclusion
from tests.daemon.token_helpers import refused, token_core
from tests.seeds import pick_seed


def test_a_blob_of_several_chunks_and_an_empty_one_arrive_whole(home: str) -> None:
    rng = random.Random(pick_seed())
    big = rng.randbytes(2 * BLOB_CHUNK_BYTES + 12345)
    with token_core(home) as c:
        store = blob_store(Home.resolve(home))
        digest = store.put(big)
        empty = store.put(b"")
        assert c.owner.blob(digest) == big
        assert c.owner.blob(empty) == b""


def test_bad_digests_are_refused_each_with_its_status(home: str) -> None:
    with token_core(home) as c:
        for wrong in (b"", b"x" * 31, b"x" * 33, b"x" * 64):
            with pytest.raises(errors.InvalidArgument, match=f"digest is {len(wrong)} bytes"):
                c.owner.blob(wrong)
        unknown = hashlib.sha256(b"never stored").digest()
        with pytest.raises(errors.NotFound, match=f"blob {unknown.hex()} is not in the store"):
            c.owner.blob(unknown)
        store = blob_store(Home.resolve(home))
        digest = store.put(b"the model's request")
        with open(store.path_of(digest), "wb") as f:
            f.write(b"the model's requesT")  # bit rot
        with pytest.raises(errors.CoreFailure, match="blob corrupt") as info:
            c.owner.blob(digest)
        assert info.value.code == "DATA_LOSS"
        store.put(b"the model's request")  # replaces the bad copy
        assert c.owner.blob(digest) == b"the model's request"


def test_no_token_role_may_read_a_blob(home: str) -> None:
    with token_core(home) as c:
        digest = blob_store(Home.resolve(home)).put(b"every session's prompts")
        for role in ("gateway", "executor", "plugin"):
            with (
                c.holder(c.mint(role)) as holder,
                refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_ROLE),
            ):
                holder.blob(digest)


def test_prove_inclusion_against_an_earlier_tree_size(home: str) -> None:
    with token_core(home) as c:
        c.owner.set_setting("agent.max_steps", 30)
        old = c.owner.head()
        c.owner.set_setting("agent.max_steps", 31)
        assert c.owner.head().size > old.size
        proof = c.owner.prove_inclusion(0, old.size)
        assert (proof.tree_size, proof.root) == (old.size, old.root)
        assert proof.checkpoint == old.checkpoint
        verifier = CheckpointVerifier(proof.key_name, proof.public_key)
        assert verifier.verify(proof.checkpoint).root == old.root
        verify_inclusion(proof.leaf_hash, 0, old.size, list(proof.path), old.root)
        with pytest.raises(errors.OutOfRange, match="past the end of the tree"):
            c.owner.prove_inclusion(old.size, old.size)
        with pytest.raises(errors.OutOfRange, match="tree_size 999 is past the ledger's end"):
            c.owner.prove_inclusion(0, 999)
