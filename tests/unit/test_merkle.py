"""RFC 9162 Merkle tree: published vectors and the argument contract."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from naga_core.errors import ProofError
from naga_core.ledger._merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    CompactRange,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

# The RFC 6962 reference tree, as published in transparency-dev/merkle
# proof/verify_test.go (variables `leaves`, `roots`, `inclusionProofs`,
# `consistencyProofs`), inherited from certificate-transparency's
# merkle_tree_test. Their inclusion vectors number leaves from 1; these are
# converted to 0-based indices.
RFC6962_LEAVES = tuple(
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
)
RFC6962_ROOTS = tuple(
    bytes.fromhex(h)
    for h in (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
)


def _hx(*hashes: str) -> tuple[bytes, ...]:
    return tuple(bytes.fromhex(h) for h in hashes)


# (index, size, path)
RFC6962_INCLUSION: tuple[tuple[int, int, tuple[bytes, ...]], ...] = (
    (0, 1, ()),
    (
        0,
        8,
        _hx(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        5,
        8,
        _hx(
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (2, 3, _hx("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")),
    (
        1,
        5,
        _hx(
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
)

# (old_size, new_size, proof)
RFC6962_CONSISTENCY: tuple[tuple[int, int, tuple[bytes, ...]], ...] = (
    (1, 1, ()),
    (
        1,
        8,
        _hx(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        6,
        8,
        _hx(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (
        2,
        5,
        _hx(
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
    (
        6,
        7,
        _hx(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
)

# transparency-dev's `sha256SomeHash`: a valid-length hash that is nobody's.
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


@pytest.fixture(scope="module")
def leaves() -> list[bytes]:
    return [leaf_hash(d) for d in RFC6962_LEAVES]


def _rejected(call: Callable[..., None], *args: object) -> bool:
    """True when the verifier raised ProofError (anything else propagates)."""
    try:
        call(*args)
    except ProofError:
        return True
    return False


# --- hashing ---------------------------------------------------------------


def test_constants() -> None:
    assert HASH_SIZE == 32
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert root([]) == EMPTY_ROOT
    assert CompactRange().root() == EMPTY_ROOT


def test_leaf_and_node_hash_are_domain_separated() -> None:
    assert leaf_hash(b"") == RFC6962_ROOTS[0]
    assert leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()
    a, b = leaf_hash(b"a"), leaf_hash(b"b")
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest()
    assert node_hash(a, b) != node_hash(b, a)
    # A leaf whose data looks like two child hashes must not collide with
    # their parent: the 0x00/0x01 prefixes are the whole point.
    assert leaf_hash(a + b) != node_hash(a, b)


@pytest.mark.parametrize(("left", "right"), [(b"", b"x" * 32), (b"x" * 32, b"x" * 33)])
def test_node_hash_rejects_wrong_lengths(left: bytes, right: bytes) -> None:
    with pytest.raises(ValueError, match="not 32"):
        node_hash(left, right)


# --- published vectors -----------------------------------------------------


def test_rfc6962_roots(leaves: list[bytes]) -> None:
    for size in range(1, 9):
        assert root(leaves[:size]) == RFC6962_ROOTS[size - 1], size
    cr = CompactRange()
    for size, h in enumerate(leaves, 1):
        cr.append(h)
        assert cr.root() == RFC6962_ROOTS[size - 1], size


@pytest.mark.parametrize(("index", "size", "published"), RFC6962_INCLUSION)
def test_rfc6962_inclusion(
    leaves: list[bytes], index: int, size: int, published: tuple[bytes, ...]
) -> None:
    path = list(published)
    assert inclusion_proof(leaves, index, size) == path
    leaf, tree_root = leaves[index], RFC6962_ROOTS[size - 1]
    verify_inclusion(leaf, index, size, path, tree_root)

    # transparency-dev's corruptInclusionProof probes, all of which must fail.
    probes: list[tuple[str, bytes, int, int, list[bytes], bytes]] = [
        ("index - 1", leaf, index - 1, size, path, tree_root),
        ("index + 1", leaf, index + 1, size, path, tree_root),
        ("index ^ 2", leaf, index ^ 2, size, path, tree_root),
        ("size * 2", leaf, index, size * 2, path, tree_root),
        ("size // 2", leaf, index, size // 2, path, tree_root),
        ("wrong leaf", leaf_hash(b"WrongLeaf"), index, size, path, tree_root),
        ("empty root", leaf, index, size, path, EMPTY_ROOT),
        ("random root", leaf, index, size, path, SOME_HASH),
        ("trailing garbage", leaf, index, size, [*path, b""], tree_root),
        ("trailing root", leaf, index, size, [*path, tree_root], tree_root),
        ("preceding garbage", leaf, index, size, [b"", *path], tree_root),
        ("preceding root", leaf, index, size, [tree_root, *path], tree_root),
    ]
    for i in range(len(path)):
        flipped = list(path)
        flipped[i] = bytes([path[i][0] ^ 8]) + path[i][1:]
        probes.append((f"proof[{i}] bit 3", leaf, index, size, flipped, tree_root))
    if path:
        probes.append(("removed component", leaf, index, size, path[:-1], tree_root))
    if len(path) > 1:
        inserted = [path[0], SOME_HASH, *path[1:]]
        probes.append(("inserted component", leaf, index, size, inserted, tree_root))
    accepted = [
        desc for desc, lf, i, n, p, r in probes if not _rejected(verify_inclusion, lf, i, n, p, r)
    ]
    assert accepted == []


@pytest.mark.parametrize(("old", "new", "published"), RFC6962_CONSISTENCY)
def test_rfc6962_consistency(
    leaves: list[bytes], old: int, new: int, published: tuple[bytes, ...]
) -> None:
    path = list(published)
    assert consistency_proof(leaves, old, new) == path
    r1, r2 = RFC6962_ROOTS[old - 1], RFC6962_ROOTS[new - 1]
    verify_consistency(old, new, r1, r2, path)
    if not path:
        return
    # transparency-dev's corruptConsistencyProof probes, all of which must fail.
    probes: list[tuple[str, int, int, bytes, bytes, list[bytes]]] = [
        ("old - 1", old - 1, new, r1, r2, path),
        ("old + 1", old + 1, new, r1, r2, path),
        ("old ^ 2", old ^ 2, new, r1, r2, path),
        ("new * 2", old, new * 2, r1, r2, path),
        ("new // 2", old, new // 2, r1, r2, path),
        ("wrong old root", old, new, SOME_HASH, r2, path),
        ("wrong new root", old, new, r1, SOME_HASH, path),
        ("swapped roots", old, new, r2, r1, path),
        ("empty proof", old, new, r1, r2, []),
        ("trailing garbage", old, new, r1, r2, [*path, b""]),
        ("trailing old root", old, new, r1, r2, [*path, r1]),
        ("trailing new root", old, new, r1, r2, [*path, r2]),
        ("preceding garbage", old, new, r1, r2, [b"", *path]),
        ("preceding old root", old, new, r1, r2, [r1, *path]),
        ("preceding new root", old, new, r1, r2, [r2, *path]),
        ("preceding proof[0]", old, new, r1, r2, [path[0], *path]),
        ("truncated", old, new, r1, r2, path[:-1]),
    ]
    for i in range(len(path)):
        flipped = list(path)
        flipped[i] = bytes([path[i][0] ^ 16]) + path[i][1:]
        probes.append((f"proof[{i}] bit 4", old, new, r1, r2, flipped))
    accepted = [
        desc for desc, m, n, a, b, p in probes if not _rejected(verify_consistency, m, n, a, b, p)
    ]
    assert accepted == []


def test_rfc6962_compact_range_hashes(leaves: list[bytes]) -> None:
    cr = CompactRange()
    for h in leaves[:7]:
        cr.append(h)
    # 7 = 4 + 2 + 1: the subtrees [0,4), [4,6), [6,7), largest first.
    assert cr.size == 7
    assert cr.hashes == (RFC6962_ROOTS[3], root(leaves[4:6]), leaves[6])
    assert cr.root() == RFC6962_ROOTS[6]


# --- the edge cases RFC 9162 leaves to the implementation ------------------


def test_consistency_edge_cases() -> None:
    r = RFC6962_ROOTS
    ok: list[tuple[int, int, bytes, bytes, list[bytes]]] = [
        (0, 0, EMPTY_ROOT, EMPTY_ROOT, []),
        (0, 1, EMPTY_ROOT, r[0], []),
        (0, 8, EMPTY_ROOT, r[7], []),
        (1, 1, r[0], r[0], []),
        (8, 8, r[7], r[7], []),
    ]
    for old, new, a, b, p in ok:
        verify_consistency(old, new, a, b, p)
    bad: list[tuple[str, int, int, bytes, bytes, list[bytes]]] = [
        ("equal sizes, different roots", 1, 1, r[0], r[1], []),
        ("equal sizes, non-empty proof", 1, 1, r[0], r[0], [r[0]]),
        ("empty old tree, wrong old root", 0, 1, r[0], r[0], []),
        ("empty trees, wrong root", 0, 0, r[0], r[0], []),
        ("from empty, non-empty proof", 0, 1, EMPTY_ROOT, r[0], [EMPTY_ROOT]),
        ("time travel", 2, 1, r[1], r[0], []),
        ("time travel to empty", 1, 0, r[0], EMPTY_ROOT, []),
        ("negative old", -1, 1, EMPTY_ROOT, r[0], []),
        ("negative new", 0, -1, EMPTY_ROOT, EMPTY_ROOT, []),
        ("empty proof", 1, 2, r[0], r[1], []),
        ("short old root", 1, 1, r[0][:31], r[0][:31], []),
        ("long new root", 1, 2, r[0], r[1] + b"\x00", [leaf_hash(b"\x00")]),
        ("short proof hash", 1, 2, r[0], r[1], [leaf_hash(b"\x00")[:31]]),
    ]
    accepted = [
        desc for desc, m, n, a, b, p in bad if not _rejected(verify_consistency, m, n, a, b, p)
    ]
    assert accepted == []


def test_inclusion_edge_cases(leaves: list[bytes]) -> None:
    h = leaves[0]
    verify_inclusion(h, 0, 1, [], h)
    bad: list[tuple[str, bytes, int, int, list[bytes], bytes]] = [
        ("empty tree", h, 0, 0, [], EMPTY_ROOT),
        ("index == size", h, 1, 1, [], h),
        ("index > size", h, 2, 1, [], h),
        ("negative index", h, -1, 1, [], h),
        ("negative size", h, 0, -1, [], h),
        ("leaf is not the root", h, 0, 1, [], leaves[1]),
        ("empty leaf", b"", 0, 1, [], h),
        ("empty root", h, 0, 1, [], b""),
        ("33-byte leaf", h + b"\x00", 0, 1, [], h + b"\x00"),
        ("short proof hash", leaves[0], 0, 2, [leaves[1][:31]], RFC6962_ROOTS[1]),
        ("size 2**64 with short proof", h, 0, 1 << 64, [], h),
    ]
    accepted = [
        desc for desc, lf, i, n, p, r in bad if not _rejected(verify_inclusion, lf, i, n, p, r)
    ]
    assert accepted == []


def test_verifiers_handle_huge_sizes_without_overflow() -> None:
    # Python ints do not overflow, but a 2**64-wide tree must still produce a
    # length mismatch, not a hang or an IndexError.
    with pytest.raises(ProofError, match="expected 64"):
        verify_inclusion(SOME_HASH, 0, 1 << 64, [SOME_HASH], SOME_HASH)
    with pytest.raises(ProofError, match="expected 64"):
        verify_consistency(1, 1 << 64, SOME_HASH, SOME_HASH, [SOME_HASH])


# --- builder argument contract: ValueError, never IndexError ---------------


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        pytest.param(inclusion_proof, (8, 8), id="index == size"),
        pytest.param(inclusion_proof, (-1, 8), id="negative index"),
        pytest.param(inclusion_proof, (0, 9), id="size beyond leaves"),
        pytest.param(inclusion_proof, (0, -1), id="negative size"),
        pytest.param(inclusion_proof, (0, 0), id="empty tree"),
        pytest.param(consistency_proof, (5, 4), id="old > new"),
        pytest.param(consistency_proof, (-1, 4), id="negative old"),
        pytest.param(consistency_proof, (1, 9), id="new beyond leaves"),
        pytest.param(consistency_proof, (0, -1), id="negative new"),
    ],
)
def test_builders_reject_bad_arguments(
    leaves: list[bytes], fn: Callable[[list[bytes], int, int], list[bytes]], args: tuple[int, int]
) -> None:
    with pytest.raises(ValueError, match=r"outside|not in"):
        fn(leaves, *args)


def test_builders_reject_bad_leaf_hashes(leaves: list[bytes]) -> None:
    short = [*leaves[:3], leaves[3][:31], *leaves[4:]]
    with pytest.raises(ValueError, match="leaf hash 3 is 31 bytes"):
        inclusion_proof(short, 0, 8)
    with pytest.raises(ValueError, match="leaf hash 3 is 31 bytes"):
        consistency_proof(short, 2, 8)
    with pytest.raises(ValueError, match="leaf hash 3 is 31 bytes"):
        root(short)


def test_builders_only_read_the_prefix(leaves: list[bytes]) -> None:
    # A bad hash beyond `size` is not part of that tree and must not matter.
    padded = [*leaves[:4], b"not a hash"]
    assert inclusion_proof(padded, 1, 4) == inclusion_proof(leaves, 1, 4)
    assert consistency_proof(padded, 2, 4) == consistency_proof(leaves, 2, 4)
    assert consistency_proof(leaves, 0, 8) == []
    assert consistency_proof(leaves, 8, 8) == []
    assert consistency_proof(leaves, 0, 0) == []


# --- CompactRange ------------------------------------------------------------


def test_compact_range_round_trip_and_copy(leaves: list[bytes]) -> None:
    cr = CompactRange()
    for h in leaves[:5]:
        cr.append(h)
    data = cr.to_bytes()
    assert data == (5).to_bytes(8, "big") + RFC6962_ROOTS[3] + leaves[4]
    again = CompactRange.from_bytes(data)
    assert (again.size, again.hashes) == (cr.size, cr.hashes)
    clone = cr.copy()
    clone.append(leaves[5])
    assert (cr.size, cr.root()) == (5, RFC6962_ROOTS[4])
    assert (clone.size, clone.root()) == (6, RFC6962_ROOTS[5])
    assert CompactRange.from_parts(5, [RFC6962_ROOTS[3], leaves[4]]).root() == RFC6962_ROOTS[4]
    assert "size=5" in repr(cr)


@pytest.mark.parametrize(
    ("size", "hashes"),
    [
        (-1, []),
        (1 << 64, [b"x" * 32]),
        (0, [b"x" * 32]),
        (3, [b"x" * 32]),
        (3, [b"x" * 32, b"x" * 31]),
        (1, [b""]),
    ],
)
def test_compact_range_from_parts_rejects(size: int, hashes: list[bytes]) -> None:
    with pytest.raises(ValueError):
        CompactRange.from_parts(size, hashes)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 7,
        (1).to_bytes(8, "big"),
        (1).to_bytes(8, "big") + b"x" * 31,
        (1).to_bytes(8, "big") + b"x" * 33,
        (0).to_bytes(8, "big") + b"x" * 32,
        (3).to_bytes(8, "big") + b"x" * 32,
        b"\xff" * 8 + b"x" * 32 * 63,
    ],
)
def test_compact_range_from_bytes_rejects(data: bytes) -> None:
    with pytest.raises(ValueError):
        CompactRange.from_bytes(data)


def test_compact_range_append_contract() -> None:
    cr = CompactRange()
    with pytest.raises(ValueError, match="not 32"):
        cr.append(b"x" * 31)
    assert cr.size == 0
    full = CompactRange.from_parts((1 << 64) - 1, [b"x" * 32] * 64)
    assert CompactRange.from_bytes(full.to_bytes()).size == (1 << 64) - 1
    with pytest.raises(ValueError, match="full"):
        full.append(b"y" * 32)
    assert full.size == (1 << 64) - 1
