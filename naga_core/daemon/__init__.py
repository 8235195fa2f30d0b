"""naga-core, the daemon: the only privileged process (SPEC section 1).

It owns the ledger and the kernel and serves them over gRPC on a Unix socket
in ``$NAGA_HOME/run`` (docs/design/architecture.md). grpcio's server threads
reach the core's trio loop through one bridge module
(docs/adr/0004-grpc-trio-bridge.md), so every ledger and kernel access runs
serially on that loop. Who may call is decided by an :class:`Authorizer`
once per RPC (:class:`CoreAuthorizer`: the owner credential or a capability
token) against one rule per method (:data:`POLICY`). A server-streaming
call stays admitted only while its token does (:class:`Standing`,
:class:`TokenStanding`): a revocation, an expiry or a lowered trust ends it.
"""

from naga_core.daemon._auth import (
    Admission,
    Authorizer,
    Caller,
    OwnerCall,
    OwnerCredential,
    Principal,
    Standing,
    Unconditional,
)
from naga_core.daemon._bridge import Bridge, Cursor, Method, Stream, Unary
from naga_core.daemon._core import CoreInfo
from naga_core.daemon._credentials import CoreAuthorizer
from naga_core.daemon._errors import (
    CoreAlreadyRunning,
    CoreStopping,
    CredentialMissing,
    CredentialRefused,
    DaemonError,
    RequestRefused,
    RunDirError,
)
from naga_core.daemon._gateway import WEBCHAT_HOST, WEBCHAT_PORT, GatewayOptions
from naga_core.daemon._policy import POLICY, VISIBLE_KINDS, Rule, rule_for
from naga_core.daemon._rundir import RunDir, running_pid
from naga_core.daemon._serve import CoreConfig, CoreExit, serve_core
from naga_core.daemon._standing import RELOOK_S, RevocationWatch, TokenStanding, TrustWatch
from naga_core.daemon._status import REJECTION_STATUS, status_of

__all__ = [
    "POLICY",
    "REJECTION_STATUS",
    "RELOOK_S",
    "VISIBLE_KINDS",
    "WEBCHAT_HOST",
    "WEBCHAT_PORT",
    "Admission",
    "Authorizer",
    "Bridge",
    "Caller",
    "CoreAlreadyRunning",
    "CoreAuthorizer",
    "CoreConfig",
    "CoreExit",
    "CoreInfo",
    "CoreStopping",
    "CredentialMissing",
    "CredentialRefused",
    "Cursor",
    "DaemonError",
    "GatewayOptions",
    "Method",
    "OwnerCall",
    "OwnerCredential",
    "Principal",
    "RequestRefused",
    "RevocationWatch",
    "Rule",
    "RunDir",
    "RunDirError",
    "Standing",
    "Stream",
    "TokenStanding",
    "TrustWatch",
    "Unary",
    "Unconditional",
    "rule_for",
    "running_pid",
    "serve_core",
    "status_of",
]
