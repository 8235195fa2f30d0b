"""Replay bundles: export a session's trace from the ledger, and re-run its
turns with the executor's own loop against the recorded model answers
(docs/design/replay.md)."""

from naga_core.replay._bundle import (
    FORMAT,
    MAGIC,
    Bundle,
    TraceRecord,
    decode_bundle,
    encode_bundle,
    export_session,
    read_bundle,
)
from naga_core.replay._errors import BundleInvalid, BundleTampered, NothingToExport, ReplayError
from naga_core.replay._run import Divergence, ReplayReport, TurnResult, replay

__all__ = [
    "FORMAT",
    "MAGIC",
    "Bundle",
    "BundleInvalid",
    "BundleTampered",
    "Divergence",
    "NothingToExport",
    "ReplayError",
    "ReplayReport",
    "TraceRecord",
    "TurnResult",
    "decode_bundle",
    "encode_bundle",
    "export_session",
    "read_bundle",
    "replay",
]
