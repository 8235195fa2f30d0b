"""The Naga ledger: durable, hash-chained, Merkle-sealed records.

Public surface; everything else in this package is private. See
docs/design/ledger.md for the format, durability and recovery rules.
"""

from naga_core.ledger._blobs import BlobProblem, BlobStore
from naga_core.ledger._checkpoint import Checkpoint, CheckpointSigner, CheckpointVerifier
from naga_core.ledger._fs import FileHandle, FileSystem, OsFileSystem
from naga_core.ledger._group import GroupCommitter
from naga_core.ledger._ledger import Head, InclusionProof, Ledger, Receipt
from naga_core.ledger._merkle import (
    CompactRange,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)
from naga_core.ledger._projection import Projection, verify_projection
from naga_core.ledger._record import Entry, Record, decode_body, leaf_hash_of
from naga_core.ledger._recovery import RecoveryReport, TornTailCut
from naga_core.ledger._segment import Seal
from naga_core.ledger._simfs import SimulatedFileSystem
from naga_core.ledger._snapshots import Snapshot, SnapshotStore
from naga_core.ledger._verify import LedgerView, Problem, VerifyReport, read_ledger, verify_ledger

__all__ = [
    "BlobProblem",
    "BlobStore",
    "Checkpoint",
    "CheckpointSigner",
    "CheckpointVerifier",
    "CompactRange",
    "Entry",
    "FileHandle",
    "FileSystem",
    "GroupCommitter",
    "Head",
    "InclusionProof",
    "Ledger",
    "LedgerView",
    "OsFileSystem",
    "Problem",
    "Projection",
    "Receipt",
    "Seal",
    "Record",
    "decode_body",
    "leaf_hash_of",
    "RecoveryReport",
    "SimulatedFileSystem",
    "Snapshot",
    "SnapshotStore",
    "TornTailCut",
    "VerifyReport",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "read_ledger",
    "node_hash",
    "root",
    "verify_consistency",
    "verify_inclusion",
    "verify_ledger",
    "verify_projection",
]
