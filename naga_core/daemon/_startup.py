"""The core's start-up state: a snapshot plus the records after it
(docs/adr/0022-hands-startup-snapshot.md).

At start the newest start-up snapshot (``ledger/snapshots/start-*.snap``)
is loaded if it is intact, of this format and bound to a record the ledger
still holds (same seq, same leaf hash); the kernel and the agent's fold are
restored from its image and only the records after it are replayed. One
that is not (a wrong checksum, a truncated file, another format, a seq or
leaf hash the ledger does not have, an image whose parts do not hold
together) is never trusted: the start replays the whole ledger and says
why in a ledger note.

While the core runs, a snapshot is written every ``ledger.snapshot_every``
records and at every clean stop: the kernel and the fold imaged at the same
record, on the trio thread (where every kernel write happens) once what is
staged is committed; the file is written off the loop.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import trio
from google.protobuf.message import DecodeError

from naga.constants import STARTUP_IMAGE_FORMAT
from naga.v1 import snapshot_pb2 as snpb
from naga_core._home import Home
from naga_core.agent import FoldImageRejected, Follower, StartFold, spent_ids
from naga_core.authz import RevocationList
from naga_core.errors import NagaError
from naga_core.kernel import Actions, ImageRejected, Keep, Kernel, Ratchet
from naga_core.ledger import Ledger, OsFileSystem, SnapshotStore
from naga_core.scheduler import FireLog

log = logging.getLogger("naga.core")

#: The series name of the core's start-up snapshots.
SNAPSHOT_NAME = "start"


def snapshots_dir(home: Home) -> str:
    return os.path.join(home.ledger_dir, "snapshots")


def snapshot_store(home: Home) -> SnapshotStore:
    return SnapshotStore(OsFileSystem(), snapshots_dir(home))


@dataclass(slots=True)
class Opened:
    """What the start rebuilt: the kernel, the agent's fold (at the image's
    record, or empty) with the scheduler's fire log following it, and why
    snapshots were passed over (a ledger note)."""

    kernel: Kernel
    fold: StartFold
    fires: FireLog
    #: the seq of the image used, -1 for a full replay
    image_seq: int = -1
    ignored: list[str] = field(default_factory=list[str])


def load_image(store: SnapshotStore, ledger: Ledger) -> tuple[snpb.StartImage | None, list[str]]:
    """The newest usable start image and why others were passed over."""

    def bound(seq: int, leaf: bytes) -> bool:
        return 0 <= seq < ledger.size and ledger.leaf_hash(seq) == leaf

    ignored: list[str] = []
    try:
        snap = store.latest(SNAPSHOT_NAME, bound)
    except NagaError as exc:  # an unlistable directory: replay, and say so
        return None, [f"snapshots unreadable: {exc}"]
    ignored += [f"{os.path.basename(path)}: {why}" for path, why in store.skipped]
    store.skipped.clear()
    if snap is None:
        return None, ignored
    name = os.path.basename(store.path_of(SNAPSHOT_NAME, snap.seq))
    try:
        image = snpb.StartImage.FromString(snap.state)
    except DecodeError:
        return None, [*ignored, f"{name}: its image does not decode"]
    if image.format != STARTUP_IMAGE_FORMAT:
        why = f"{name}: image format {image.format}, this core reads {STARTUP_IMAGE_FORMAT}"
        return None, [*ignored, why]
    if image.seq != snap.seq:
        return None, [*ignored, f"{name}: its image is of seq {image.seq}, not {snap.seq}"]
    return image, ignored


def open_state(
    ledger: Ledger,
    actions: Actions,
    *,
    ratchets: Sequence[Ratchet],
    keeps: Sequence[Keep] = (),
    store: SnapshotStore,
    new_fold: Callable[[Sequence[Follower]], StartFold],
    keys_kept: int,
) -> Opened:
    """The kernel (its recovery run) and the agent's fold at the newest
    usable snapshot, or from a full replay; a snapshot ignored is noted.
    ``new_fold(also)``: an empty fold with ``also`` following it."""
    image, ignored = load_image(store, ledger)
    opened: Opened | None = None
    if image is not None:
        try:
            try:
                fires = FireLog.restore(image.fires)
            except ValueError as exc:
                raise FoldImageRejected(f"its fire log is unusable: {exc}") from None
            fold = StartFold.restore(image.agent, image.seq, keys_kept=keys_kept, also=(fires,))
            kernel = Kernel.open(
                ledger,
                actions,
                ratchets=ratchets,
                keeps=keeps,
                image=image.kernel,
                image_seq=image.seq,
            )
            opened = Opened(kernel, fold, fires, image.seq, ignored)
        except (ImageRejected, FoldImageRejected) as exc:
            ignored.append(f"{SNAPSHOT_NAME} snapshot at seq {image.seq}: {exc}")
    if opened is None:
        fires = FireLog()
        kernel = Kernel.open(ledger, actions, ratchets=ratchets, keeps=keeps)
        opened = Opened(kernel, new_fold((fires,)), fires, -1, ignored)
    if ignored:
        text = (
            "start-up snapshot ignored, the start replayed the whole ledger: "
            if opened.image_seq < 0
            else "start-up snapshot ignored, an older one was used: "
        ) + "; ".join(ignored)
        log.warning("naga-core: %s", text)
        opened.kernel.perform([], None, description=text[:1000])
    return opened


class StartSnapshots:
    """Writes the core's start-up snapshots (see the module doc)."""

    def __init__(
        self,
        ledger: Ledger,
        kernel: Kernel,
        store: SnapshotStore,
        *,
        every: Callable[[], int],
        clock: Callable[[], int] = time.time_ns,
        last_seq: int = -1,
    ) -> None:
        self._ledger = ledger
        self._kernel = kernel
        self._store = store
        self._every = every
        self._clock = clock
        self._fold: StartFold | None = None
        self._fires = FireLog()
        #: the seq of the newest snapshot written or loaded (-1: none)
        self.last_seq = last_seq
        self.written = 0

    def follow(self, fold: StartFold, fires: FireLog) -> None:
        """The agent's fold (``fires`` following it), once its start brought
        it to the head."""
        self._fold = fold
        self._fires = fires

    async def serve(
        self,
        wait_past: Callable[[int], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Write a snapshot whenever the ledger grew by ``every`` records."""
        task_status.started()
        while True:
            due = self.last_seq + self._every()
            await wait_past(due)
            if self._ledger.size - 1 < due:
                return  # the core is stopping (wait_past returns then)
            if self._fold is not None:  # the bulk of the tail, off the loop
                await trio.to_thread.run_sync(self._fold.advance, self._ledger)
            try:
                taken = self._take()
                if taken is not None:
                    await trio.to_thread.run_sync(self._save, *taken)
            except NagaError as exc:  # the core goes on; the next start replays more
                log.warning("naga-core: start-up snapshot not written: %s", exc)
                return

    def write(self) -> bool:
        """Take and save a snapshot now (at a clean stop, on the trio thread
        once nothing else writes). False when there is nothing new."""
        taken = self._take()
        if taken is None:
            return False
        self._save(*taken)
        return True

    def _save(self, seq: int, leaf: bytes, data: bytes) -> None:
        self._store.save(SNAPSHOT_NAME, seq, leaf, data)
        self.last_seq = max(self.last_seq, seq)
        self.written += 1

    def _take(self) -> tuple[int, bytes, bytes] | None:
        """The kernel and the fold imaged at the ledger's head, on the trio
        thread; None when there is nothing new or no fold yet."""
        fold = self._fold
        if fold is None:
            return None
        ledger = self._ledger
        if ledger.next_seq != ledger.size:
            ledger.commit()  # the kernel has absorbed what is staged: make it the head
        fold.advance(ledger)
        head = ledger.size - 1
        if head <= self.last_seq or head < 0 or fold.seq != head:
            return None
        fold.prune(
            spent_ids(self._kernel), self._clock(), revoked=RevocationList(self._kernel).revoked()
        )
        image = snpb.StartImage(
            format=STARTUP_IMAGE_FORMAT,
            seq=head,
            kernel=self._kernel.image(),
            agent=fold.image(),
            fires=self._fires.image(),
        )
        return head, ledger.leaf_hash(head), image.SerializeToString()


__all__ = [
    "SNAPSHOT_NAME",
    "Opened",
    "StartSnapshots",
    "load_image",
    "open_state",
    "snapshot_store",
    "snapshots_dir",
]
