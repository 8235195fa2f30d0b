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
    export_trace,
    read_bundle,
)
from naga_core.replay._errors import (
    BundleInvalid,
    BundleTampered,
    NothingToExport,
    ReplayError,
    SourceFailed,
)
from naga_core.replay._run import Divergence, ReplayReport, TurnResult, replay
from naga_core.replay._source import CoreSource, LedgerSource, TraceSource

__all__ = [
    "FORMAT",
    "MAGIC",
    "Bundle",
    "BundleInvalid",
    "BundleTampered",
    "CoreSource",
    "Divergence",
    "LedgerSource",
    "NothingToExport",
    "ReplayError",
    "ReplayReport",
    "SourceFailed",
    "TraceRecord",
    "TraceSource",
    "TurnResult",
    "decode_bundle",
    "encode_bundle",
    "export_session",
    "export_trace",
    "read_bundle",
    "replay",
]
