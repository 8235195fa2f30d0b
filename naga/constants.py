"""The numbers the design fixes, in one place.

docs/design/constants.md lists each of these with its reason; a test
(tests/unit/test_constants_doc.py) fails when the two disagree. Change a value
here and in the doc together.
"""

from __future__ import annotations

from typing import Final

# --- ledger record framing -------------------------------------------------
#: First four bytes of every record. Non-zero, so a zero-filled tail never
#: parses as a record.
RECORD_MAGIC: Final = b"NGL1"
#: Record format version carried in every header.
RECORD_VERSION: Final = 1
#: Header bytes: magic(4) version(1) reserved(3) body_len(4) batch_pos(4)
#: batch_len(4) crc32(4).
RECORD_HEADER_BYTES: Final = 24
#: Largest record body accepted on write or read (bigger payloads go to the
#: blob store and are referenced by digest).
MAX_RECORD_BODY_BYTES: Final = 1 << 20
#: Longest record kind, in ASCII bytes.
MAX_KIND_BYTES: Final = 64
#: Most blob references one record may carry.
MAX_BLOB_REFS: Final = 64

# --- segments ---------------------------------------------------------------
#: A segment is sealed once the next record would take it past this size.
#: Small enough that the unsealed tail a start scans record by record stays
#: short (docs/adr/0022-hands-startup-snapshot.md); sealed ones are checked
#: by one hash each.
SEGMENT_MAX_BYTES: Final = 8 << 20
#: Digits of the first sequence number in a segment's file name.
SEGMENT_NAME_DIGITS: Final = 20

# --- durability / group commit ---------------------------------------------
#: Most records one group commit writes with a single fdatasync.
GROUP_COMMIT_MAX_RECORDS: Final = 4096
#: Most bytes one group commit writes with a single fdatasync.
GROUP_COMMIT_MAX_BYTES: Final = 8 << 20
#: Sync policy: every acknowledged append has been fdatasync'ed; new files and
#: renames are followed by an fsync of their directory. Any failed sync is
#: fatal for the open ledger and never retried.
SYNC_POLICY: Final = "fdatasync-before-ack"

# --- checkpoints --------------------------------------------------------------
#: Origin line of every signed checkpoint (C2SP tlog-checkpoint).
CHECKPOINT_ORIGIN_PREFIX: Final = "naga.ledger/v1"

# --- blob store ----------------------------------------------------------------
#: Largest blob accepted.
MAX_BLOB_BYTES: Final = 256 << 20
#: Bytes of blob one LedgerService.GetBlob chunk carries: well under the
#: response limit, so a blob of any size streams in bounded messages.
BLOB_CHUNK_BYTES: Final = 1 << 20

# --- snapshots ------------------------------------------------------------------
#: Snapshots kept on disk; older ones are removed after a new one is durable.
SNAPSHOTS_KEPT: Final = 3
#: The format of the core's start-up image (naga.v1.StartImage.format); a
#: snapshot of any other is ignored and the start replays the ledger.
STARTUP_IMAGE_FORMAT: Final = 4

# --- the core's background rehash of sealed segments (ADR 0057, ADR 0061) ---------
#: Bytes a second the rehash reads at most: a year of records (about 450 MB
#: of sealed files) in 15 s, a few percent of a core.
REHASH_BYTES_PER_S: Final = 32 << 20
#: The nice value of the rehash's own thread: it runs on what turns leave.
REHASH_NICE: Final = 19
#: Seconds of rehashing between two progress lines in the core's log.
REHASH_PROGRESS_S: Final = 10.0
#: Seconds a running core waits at most before it looks again for sealed
#: segments due for their rehash (a changed ledger.reverify_days is read then).
REHASH_LOOK_MAX_S: Final = 86400.0
#: Seconds a running core waits at least between two looks: a segment the
#: core sealed is verified within the hour, and an unwritable verified list
#: costs a rehash of the segments an hour, not one after another.
REHASH_LOOK_MIN_S: Final = 3600.0
#: The file naming the sealed segments verified and when (in ledger/); its
#: damage only means "verify again".
VERIFIED_FILE: Final = "sealed-verified.json"

# --- timeouts -------------------------------------------------------------------
#: How long a writer waits for the ledger lock held by another process.
LEDGER_LOCK_TIMEOUT_S: Final = 0.0

# --- capability tokens ------------------------------------------------------------
#: Format version written in every token, and the only one accepted.
TOKEN_VERSION: Final = 1
#: Bytes of a token id (random, chosen by the core).
TOKEN_ID_BYTES: Final = 16
#: Bytes of the root key in $NAGA_HOME/keys/token.key.
TOKEN_KEY_BYTES: Final = 32
#: Domain-separation prefix of the first link of a token's HMAC chain.
TOKEN_TAG_DOMAIN: Final = b"naga-token-v1\x00"
#: Largest serialized token accepted (or produced by an attenuation).
TOKEN_MAX_BYTES: Final = 4096
#: Most caveats one token carries.
TOKEN_MAX_CAVEATS: Final = 32
#: Deepest lineage: a root token's sub-task's sub-task ..., this many levels down.
TOKEN_MAX_SPAWN_DEPTH: Final = 8
#: Most names in one tool allowlist caveat.
TOKEN_MAX_TOOLS: Final = 32
#: Longest tool name in an allowlist, in characters.
TOKEN_MAX_TOOL_NAME_CHARS: Final = 64

# --- the core daemon's socket and calls ------------------------------------------
#: Directory under $NAGA_HOME holding the core's socket, lock, pid and owner
#: credential (mode 0700).
RUN_DIR_NAME: Final = "run"
#: The core's gRPC Unix socket, in the run directory (mode 0600).
CORE_SOCKET_NAME: Final = "core.sock"
#: The owner credential file, in the run directory (mode 0600): raw random bytes.
OWNER_TOKEN_NAME: Final = "owner.token"
#: Bytes of the owner credential the core generates at every start.
OWNER_TOKEN_BYTES: Final = 32
#: Largest request message the core accepts: a turn's message
#: (MAX_MESSAGE_BYTES) and a model call's prompt within the largest window
#: a provider may declare (docs/adr/0010-prompt-budget.md) fit.
MAX_RPC_REQUEST_BYTES: Final = 8 << 20
#: The largest file the owner sends to a WeChat user in one request (it fits one).
WECHAT_SEND_MAX_BYTES: Final = 6 << 20
#: Longest message one turn (or steer) may carry, in UTF-8 bytes: a long
#: paste is taken and fitted to the model's window, not refused. Below the
#: ledger's MAX_RECORD_BODY_BYTES with room for the record's other fields.
MAX_MESSAGE_BYTES: Final = 1_000_000
#: Images with one turn's message (docs/adr/0047-vision16-images.md): at most
#: this many, each at most MAX_IMAGE_BYTES, all together at most
#: MAX_TURN_IMAGE_BYTES (the request carrying them to the provider plugin is
#: one PLUGIN_MAX_FRAME_BYTES frame); each counted as IMAGE_TOKENS tokens in
#: the prompt budget.
MAX_IMAGES_PER_TURN: Final = 4
MAX_IMAGE_BYTES: Final = 5 << 20
MAX_TURN_IMAGE_BYTES: Final = 8 << 20
IMAGE_TOKENS: Final = 1_600
#: Largest response message the core sends (and clients accept).
MAX_RPC_RESPONSE_BYTES: Final = 8 << 20
#: Most bytes of record payload one GetRecords page or Subscribe batch carries.
RECORDS_PAGE_MAX_BYTES: Final = 4 << 20
#: Most entries one page of GetRecords or History returns.
MAX_PAGE_ENTRIES: Final = 1000
#: Threads serving gRPC calls in the core (each call holds one while it runs).
CORE_RPC_THREADS: Final = 320
#: Most Subscribe streams open at once (each holds a thread while it waits).
MAX_SUBSCRIBERS: Final = 8
#: Most TurnService.Run streams open at once (each holds a thread while its
#: turn waits in the core's lanes and while it runs).
MAX_RUN_STREAMS: Final = 256
#: Seconds in-flight calls get to finish when the core stops.
SHUTDOWN_GRACE_S: Final = 5.0
#: Default deadline of one SDK call, in seconds.
RPC_DEADLINE_S: Final = 10.0
#: run/core.log rotates past this size into core.log.1 (docs/adr/0032-...).
CORE_LOG_ROTATE_BYTES: Final = 4 << 20
#: Rotated files kept beside run/core.log (core.log.1 .. core.log.3); older ones are deleted.
CORE_LOG_KEPT_FILES: Final = 3

# --- the agent's sessions -------------------------------------------------------------
#: Idempotency keys a session remembers (its latest turns); an older key sent
#: again is a new message.
IDEMPOTENCY_KEYS_KEPT: Final = 1000
#: Sessions whose history and keys the core keeps in memory (most recently
#: used); the others keep a summary and are reloaded from the ledger on use.
SESSIONS_KEPT: Final = 64
#: Distillations of archived sessions the core runs at once, in the
#: background (docs/adr/0050-distill18-background-distillation.md).
DISTILL_AT_ONCE: Final = 1
#: Longest wait between two looks for idle sessions to distil, while
#: memory.distill_idle_h is on (docs/adr/0055-idle18-idle-distillation.md).
DISTILL_IDLE_CHECK_S: Final = 300.0
#: How often an off memory.distill_idle_h is read again.
DISTILL_IDLE_RECHECK_S: Final = 60.0

# --- plugins -----------------------------------------------------------------------
#: The manifest file in a plugin's directory.
PLUGIN_MANIFEST_NAME: Final = "plugin.toml"
#: Version of the core <-> plugin wire (proto/naga/v1/plugin.proto); a Hello
#: with another is refused.
PLUGIN_PROTOCOL_VERSION: Final = 1
#: Largest frame either side of the plugin wire accepts (4-byte length
#: excluded): a tool result of several MiB (stored as a blob, shown cut) and
#: an executor job with a prompt of the largest window fit.
PLUGIN_MAX_FRAME_BYTES: Final = 16 << 20
#: Most Progress text the core delivers for one call, in bytes (UTF-8); more is dropped.
PLUGIN_MAX_PROGRESS_BYTES: Final = 1 << 20
#: Most Progress frames the core delivers for one call; more are dropped.
PLUGIN_MAX_PROGRESS_FRAMES: Final = 65536
#: Longest plugin name, in characters.
PLUGIN_MAX_NAME_CHARS: Final = 40
#: Longest arguments JSON text one tool call may carry, in characters.
PLUGIN_MAX_ARGUMENTS_CHARS: Final = 60000
#: Most tool calls one ToolService.CallStep carries (an executor splits a
#: longer step into several, each within MAX_RPC_REQUEST_BYTES).
TOOL_STEP_MAX_CALLS: Final = 16
#: Times a model may make the same failing tool call (name and arguments)
#: in one turn: at the last, the turn ends with the call's error.
TOOL_REPEATED_FAILURES_MAX: Final = 3
#: Most PluginService.Invoke calls in flight at once (each holds a server thread).
MAX_PLUGIN_CALLS_IN_FLIGHT: Final = 4

# --- names every process shares (docs/design/naming.md) ------------------------------
#: The environment variable carrying a sandboxed process's capability token (base64).
TOKEN_ENV: Final = "NAGA_TOKEN"
#: The environment variable naming the core's socket inside a sandbox.
CORE_SOCKET_ENV: Final = "NAGA_CORE_SOCKET"
#: The environment variable naming the core's egress proxy socket inside a
#: sandbox (plugins that reach the network only through it: naga_core.egress).
EGRESS_SOCKET_ENV: Final = "NAGA_EGRESS_SOCKET"
#: The executor's one tool: a turn.
EXECUTOR_TOOL: Final = "executor.turn"
#: The plugin name of every model provider worker.
PROVIDER_PLUGIN: Final = "provider"
#: The provider worker's one tool: a model call.
PROVIDER_TOOL: Final = "provider.complete"
#: The provider's configuration, written by the core beside the worker's manifest.
PROVIDER_CONFIG_FILE: Final = "provider.pb"
#: The exit code of a plugin worker whose code does not match its manifest
#: (sysexits EX_CONFIG); the core names the cause from it.
PLUGIN_SETUP_EXIT_CODE: Final = 78
#: Record kind of every kernel effect (and abort) in the ledger.
KERNEL_EFFECT_KIND: Final = "kernel.effect"
#: The kernel state family of the settings (a SetOp's ``family``).
KERNEL_SETTING_FAMILY: Final = "setting"
#: A session name (the whole string matches).
SESSION_PATTERN: Final = r"[a-z0-9][a-z0-9_.:-]{0,127}"
#: Longest idempotency key a client may send with a message, in characters.
MAX_IDEMPOTENCY_KEY_CHARS: Final = 128
#: Version of the console's WebSocket protocol (docs/protocol/websocket.md), sent in ``connect``.
CONSOLE_PROTOCOL_VERSION: Final = 1
#: Trailing metadata key naming a failed call's refusal (a ``naga.v1.Refusal`` name).
REFUSAL_KEY: Final = "naga-refusal"
