"""naga-core, the daemon: the only privileged process (SPEC section 1).

It owns the ledger and the kernel and serves them over gRPC on a Unix socket
in ``$NAGA_HOME/run`` (docs/design/architecture.md). grpcio's server threads
reach the core's trio loop through one bridge module
(docs/adr/0004-grpc-trio-bridge.md), so every ledger and kernel access runs
serially on that loop. Who may call is decided by an :class:`Authorizer`
once per RPC; today the owner credential.
"""

from naga_core.daemon._auth import Authorizer, OwnerCredential, Principal
from naga_core.daemon._bridge import Bridge, Cursor, Method, Stream, Unary
from naga_core.daemon._core import CoreInfo
from naga_core.daemon._errors import (
    CoreAlreadyRunning,
    CoreStopping,
    CredentialMissing,
    CredentialRefused,
    DaemonError,
    RequestRefused,
    RunDirError,
)
from naga_core.daemon._rundir import RunDir, running_pid
from naga_core.daemon._serve import CoreConfig, CoreExit, serve_core
from naga_core.daemon._status import status_of

__all__ = [
    "Authorizer",
    "Bridge",
    "CoreAlreadyRunning",
    "CoreConfig",
    "CoreExit",
    "CoreInfo",
    "CoreStopping",
    "CredentialMissing",
    "CredentialRefused",
    "Cursor",
    "DaemonError",
    "Method",
    "OwnerCredential",
    "Principal",
    "RequestRefused",
    "RunDir",
    "RunDirError",
    "Stream",
    "Unary",
    "running_pid",
    "serve_core",
    "status_of",
]
