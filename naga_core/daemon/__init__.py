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
from naga_core.daemon._bridge import AsyncUnary, Bridge, Cursor, Method, Stream, Unary
from naga_core.daemon._console_login import (
    LOGIN_COMMAND,
    ConsoleKeyError,
    ConsoleLogins,
    console_key_path,
)
from naga_core.daemon._core import CoreInfo
from naga_core.daemon._core_log import LOG_FORMAT, log_to_run_dir
from naga_core.daemon._credentials import CoreAuthorizer
from naga_core.daemon._errors import (
    ConsoleProofRequired,
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
from naga_core.daemon._rehash import RehashOptions, RehashReport, RehashWatch
from naga_core.daemon._rundir import RunDir, running_pid
from naga_core.daemon._serve import CoreConfig, CoreExit, serve_core
from naga_core.daemon._standing import RELOOK_S, RevocationWatch, TokenStanding, TrustWatch
from naga_core.daemon._startup import Opened, open_state, snapshot_store
from naga_core.daemon._status import REJECTION_STATUS, STATUS_OF, refusal_of, status_of
from naga_core.daemon._verified import VerifiedList, interval_ns

__all__ = [
    "LOGIN_COMMAND",
    "LOG_FORMAT",
    "ConsoleKeyError",
    "ConsoleLogins",
    "console_key_path",
    "POLICY",
    "REJECTION_STATUS",
    "STATUS_OF",
    "RELOOK_S",
    "VISIBLE_KINDS",
    "WEBCHAT_HOST",
    "WEBCHAT_PORT",
    "Admission",
    "Authorizer",
    "AsyncUnary",
    "Bridge",
    "Caller",
    "CoreAlreadyRunning",
    "CoreAuthorizer",
    "CoreConfig",
    "CoreExit",
    "CoreInfo",
    "CoreStopping",
    "ConsoleProofRequired",
    "CredentialMissing",
    "CredentialRefused",
    "Cursor",
    "DaemonError",
    "GatewayOptions",
    "Method",
    "OwnerCall",
    "OwnerCredential",
    "Principal",
    "RehashOptions",
    "RehashReport",
    "RehashWatch",
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
    "VerifiedList",
    "interval_ns",
    "log_to_run_dir",
    "rule_for",
    "running_pid",
    "serve_core",
    "Opened",
    "open_state",
    "snapshot_store",
    "refusal_of",
    "status_of",
]
