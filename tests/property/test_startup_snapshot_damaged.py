"""Every kind of damaged start-up snapshot is ignored, with a full replay
and a ledger note (docs/adr/0022-hands-startup-snapshot.md): a flipped byte,
a truncation, another ledger's record, past the head, another format, an
image that does not hold together, garbage.

The home is the one test_startup_snapshot.py runs random ledgers through,
here with one fixed history and one snapshot taken in it.
"""

from __future__ import annotations

import os
from pathlib import Path

from naga.constants import STARTUP_IMAGE_FORMAT
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.daemon._startup import SNAPSHOT_NAME
from naga_core.errors import NagaError
from naga_core.kernel import ImageRejected, Kernel
from tests.property.test_startup_snapshot import SnapshotHome, open_start, same_start


def _home_with_snapshot(root: str) -> SnapshotHome:
    h = SnapshotHome(root)
    ops = [
        ("register", 1, 2),
        ("perform", 2, 3),
        ("turn", 0, 0),
        ("turn", 1, 0),
        ("turn", 0, 1),
        ("spend", 3, 5),
        ("fail", 1, 0),
        ("rollback", 2, 0),
        ("snapshot", 0, 0),
        ("register", 4, 1),
        ("turn", 1, 1),
    ]
    for op in ops:
        h.run(op)
    return h


def _notes(kernel: Kernel, since: int) -> list[str]:
    out: list[str] = []
    for rec in kernel.ledger.iter_records(since):
        if rec.kind == "kernel.effect":
            effect = kpb.Effect.FromString(rec.payload)
            if "start-up snapshot ignored" in effect.description:
                out.append(effect.description)
    return out


def _check_ignored(h: SnapshotHome, why: str) -> None:
    before = h.ledger.size
    damaged = open_start(h)
    assert damaged.image_seq == -1, "a damaged snapshot was used"
    assert any(why in i for i in damaged.ignored), damaged.ignored
    notes = _notes(damaged.kernel, before)
    assert len(notes) == 1, notes
    assert why in notes[0], notes
    for _seq, path in h.store.list(SNAPSHOT_NAME):
        os.remove(path)
    replayed = open_start(h)
    same_start(damaged, replayed, h.ledger)


def _only_snapshot(h: SnapshotHome) -> str:
    listed = h.store.list(SNAPSHOT_NAME)
    assert len(listed) == 1
    return listed[0][1]


def _rewrite_image(h: SnapshotHome, change: object) -> None:
    """Save the snapshot again with its image changed by ``change``, valid
    checksum and binding: only the image itself is wrong."""
    seq, path = h.store.list(SNAPSHOT_NAME)[0]
    snap = h.store.latest(SNAPSHOT_NAME, lambda _s, _h: True)
    assert snap is not None
    image = snpb.StartImage.FromString(snap.state)
    change(image)  # pyright: ignore[reportCallIssue]
    os.remove(path)
    h.store.save(SNAPSHOT_NAME, seq, snap.leaf_hash, image.SerializeToString())


def test_a_flipped_byte_is_ignored(tmp_path: Path) -> None:
    h = _home_with_snapshot(str(tmp_path))
    try:
        path = _only_snapshot(h)
        raw = bytearray(Path(path).read_bytes())
        raw[len(raw) // 2] ^= 0x01
        Path(path).write_bytes(bytes(raw))
        _check_ignored(h, "checksum mismatch")
    finally:
        h.close()


def test_a_truncated_snapshot_is_ignored(tmp_path: Path) -> None:
    h = _home_with_snapshot(str(tmp_path))
    try:
        path = _only_snapshot(h)
        raw = Path(path).read_bytes()
        Path(path).write_bytes(raw[: len(raw) - 40])
        _check_ignored(h, "truncated")
    finally:
        h.close()


def test_a_snapshot_of_another_ledger_is_ignored(tmp_path: Path) -> None:
    """The right seq, a record the ledger does not hold there (wrong head)."""
    h = _home_with_snapshot(str(tmp_path))
    try:
        seq, path = h.store.list(SNAPSHOT_NAME)[0]
        snap = h.store.latest(SNAPSHOT_NAME, lambda _s, _h: True)
        assert snap is not None
        os.remove(path)
        h.store.save(SNAPSHOT_NAME, seq, bytes(32), snap.state)
        _check_ignored(h, "does not match the ledger")
    finally:
        h.close()


def test_a_snapshot_past_the_ledger_head_is_ignored(tmp_path: Path) -> None:
    h = _home_with_snapshot(str(tmp_path))
    try:
        snap = h.store.latest(SNAPSHOT_NAME, lambda _s, _h: True)
        assert snap is not None
        os.remove(_only_snapshot(h))
        h.store.save(SNAPSHOT_NAME, h.ledger.size + 5, snap.leaf_hash, snap.state)
        _check_ignored(h, "does not match the ledger")
    finally:
        h.close()


def test_a_snapshot_of_another_format_is_ignored(tmp_path: Path) -> None:
    h = _home_with_snapshot(str(tmp_path))
    try:

        def other(image: snpb.StartImage) -> None:
            image.format = STARTUP_IMAGE_FORMAT + 1

        _rewrite_image(h, other)
        _check_ignored(h, f"image format {STARTUP_IMAGE_FORMAT + 1}")
    finally:
        h.close()


def test_an_image_that_does_not_hold_together_is_ignored(tmp_path: Path) -> None:
    h = _home_with_snapshot(str(tmp_path))
    try:

        def dangling(image: snpb.StartImage) -> None:
            image.kernel.in_force_tops[-1] = 10**6

        _rewrite_image(h, dangling)
        _check_ignored(h, "is unusable")
    finally:
        h.close()


def test_an_agent_image_past_its_seq_is_ignored(tmp_path: Path) -> None:
    h = _home_with_snapshot(str(tmp_path))
    try:

        def future(image: snpb.StartImage) -> None:
            image.agent.sessions[0].last_seq = image.seq + 100

        _rewrite_image(h, future)
        _check_ignored(h, "is unusable")
    finally:
        h.close()


def test_a_memory_or_fires_image_that_does_not_hold_together_is_ignored(
    tmp_path: Path,
) -> None:
    for n, change in enumerate(("memory", "fires")):
        h = _home_with_snapshot(str(tmp_path / str(n)))
        try:
            h.run(("remember", 1, 7))
            h.run(("fire", 0, 1))
            h.run(("snapshot", 0, 0))
            for _seq, path in h.store.list(SNAPSHOT_NAME)[:-1]:
                os.remove(path)

            def damage(image: snpb.StartImage, what: str = change) -> None:
                if what == "memory":
                    image.agent.memory.items[0].seq = image.seq + 1
                else:
                    image.fires.jobs.append(image.fires.jobs[0])

            _rewrite_image(h, damage)
            _check_ignored(h, "is unusable")
        finally:
            h.close()


def test_garbage_that_is_not_an_image_is_ignored(tmp_path: Path) -> None:
    h = _home_with_snapshot(str(tmp_path))
    try:
        seq, path = h.store.list(SNAPSHOT_NAME)[0]
        os.remove(path)
        h.store.save(SNAPSHOT_NAME, seq, h.ledger.leaf_hash(seq), b"\xff" * 64)
        _check_ignored(h, "does not decode")
    finally:
        h.close()


def test_errors_are_naga_errors() -> None:
    assert issubclass(ImageRejected, NagaError)
