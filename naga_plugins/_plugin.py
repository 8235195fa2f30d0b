"""The plugin SDK: :class:`Plugin` turns decorated functions into a worker.

    from naga_plugins import Plugin, ToolFailed

    plugin = Plugin("clock")

    @plugin.tool("clock.now")
    def now(timezone: str = "UTC") -> dict[str, str]:
        ...

    main = plugin.main  # the manifest's entry: "my_package.clock:main"

The core launches ``main`` in a sandbox with two arguments: the descriptor
of its end of the socket pair and the manifest's path. ``main`` checks the
code against the manifest (every tool on both sides, the same parameters),
says Hello, then serves: Pings are answered on the main thread at once,
each Invoke runs on a small thread pool (the manifest's
``max_concurrent_calls``), its arguments checked against the tool's params
first. It returns (the worker exits 0) on Shutdown or when the core closes
the socket.

Everything a tool needs must be imported when the plugin module is, not in
the tool: once the sandbox's filter is on, no shared library can be loaded.
"""

from __future__ import annotations

import base64
import binascii
import contextlib

# socket.getaddrinfo() encodes host names with the idna codec, imported on
# first use, and it loads the unicodedata extension: after the sandbox's
# filter no shared library can be loaded, so every plugin that names a host
# would fail ("unknown encoding: idna"). Loaded here, before the filter.
import encodings.idna  # noqa: F401  # pyright: ignore[reportUnusedImport]
import inspect
import json
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from naga.constants import (
    CORE_SOCKET_ENV,
    PLUGIN_MAX_FRAME_BYTES,
    PLUGIN_PROTOCOL_VERSION,
    PLUGIN_SETUP_EXIT_CODE,
    TOKEN_ENV,
)
from naga.plugin import Manifest, ToolSpec, check_arguments
from naga.plugin.errors import FrameError, InvalidArguments, ManifestInvalid
from naga.v1 import plugin_pb2 as pb
from naga_plugins._call import Call, current_call, done, running
from naga_plugins._connection import Connection
from naga_plugins.errors import PluginSetupError, ToolFailed

#: The SDK's version, sent in every Hello.
SDK_VERSION = 1
#: The exit code of a worker whose code does not match its manifest
#: (sysexits EX_CONFIG); the core names the cause from it.
SETUP_EXIT_CODE = PLUGIN_SETUP_EXIT_CODE
#: The exit code of a worker that left while tools still ran (sysexits EX_SOFTWARE).
STUCK_EXIT_CODE = 70
#: After Shutdown or the core's end, how long calls in flight get to finish.
SHUTDOWN_GRACE_S = 1.0
#: Room a Result frame needs besides its JSON text.
_FRAME_OVERHEAD = 64
_MAX_MESSAGE_CHARS = 1000

F = TypeVar("F", bound=Callable[..., object])


class Plugin:
    """One plugin's tools. Register them with :meth:`tool`; export
    :meth:`main` as the manifest's entry."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tools: dict[str, Callable[..., object]] = {}
        #: Tools of the core's own workers: Invoke in, Result out, typed.
        self._typed: dict[str, Callable[[pb.Invoke], pb.Result]] = {}
        self._manifest: Manifest | None = None

    def tool(self, name: str) -> Callable[[F], F]:
        """Register the decorated function as the tool ``name``. Its
        parameters must be the tool's params in the manifest: required ones
        without a default, optional ones with one."""

        def register(fn: F) -> F:
            if name in self._tools:
                raise PluginSetupError(f"tool {name!r} is registered twice")
            self._tools[name] = fn
            return fn

        return register

    def typed_tool(
        self, name: str
    ) -> Callable[[Callable[[pb.Invoke], pb.Result]], Callable[[pb.Invoke], pb.Result]]:
        """Register the decorated function as the typed tool ``name`` of one
        of the core's own workers (the executor, the model provider): it
        takes the Invoke (its payload set, no arguments) and returns the
        Result with its payload; the SDK sets the call id. Its manifest
        entry has no params. Model-facing tools use :meth:`tool`."""

        def register(
            fn: Callable[[pb.Invoke], pb.Result],
        ) -> Callable[[pb.Invoke], pb.Result]:
            if name in self._tools or name in self._typed:
                raise PluginSetupError(f"tool {name!r} is registered twice")
            self._typed[name] = fn
            return fn

        return register

    @property
    def manifest(self) -> Manifest:
        """The manifest the worker serves (set by :meth:`main`)."""
        if self._manifest is None:
            raise PluginSetupError("the manifest is loaded by main(); no worker runs yet")
        return self._manifest

    # --- the worker ----------------------------------------------------------------

    def main(self, args: Sequence[str]) -> int:
        """The sandbox target. Returns the worker's exit code."""
        try:
            fd, manifest = self._setup(args)
        except (PluginSetupError, ManifestInvalid) as exc:
            sys.stderr.write(f"plugin {self.name}: cannot serve: {exc}\n")
            return SETUP_EXIT_CODE
        connection = Connection.inherited(fd)
        try:
            return self._serve(connection, manifest)
        finally:
            connection.close()

    def _setup(self, args: Sequence[str]) -> tuple[int, Manifest]:
        if len(args) != 2 or not args[0].isdigit():
            raise PluginSetupError(f"expected the arguments SOCKET_FD MANIFEST_PATH, got {args!r}")
        manifest = Manifest.load(args[1], local_egress=True)  # the core checks it
        self.check(manifest)
        self._manifest = manifest
        return int(args[0]), manifest

    def check(self, manifest: Manifest) -> None:
        """Refuse a manifest this code does not implement exactly."""
        if manifest.name != self.name:
            raise PluginSetupError(f"the manifest is for {manifest.name!r}, not {self.name!r}")
        declared = {t.name for t in manifest.tools}
        mine = set(self._tools) | set(self._typed)
        missing = sorted(declared - mine)
        extra = sorted(mine - declared)
        if missing:
            raise PluginSetupError(f"tools in the manifest but not in the code: {missing}")
        if extra:
            raise PluginSetupError(f"tools in the code but not in the manifest: {extra}")
        for spec in manifest.tools:
            if spec.name in self._typed:
                if spec.params:
                    raise PluginSetupError(
                        f"tool {spec.name} takes a typed payload; its manifest lists params"
                    )
                continue
            _check_signature(spec, self._tools[spec.name])

    def _serve(self, connection: Connection, manifest: Manifest) -> int:
        hello = pb.Hello(
            manifest=manifest.to_proto(),
            sdk_version=SDK_VERSION,
            protocol_version=PLUGIN_PROTOCOL_VERSION,
        )
        connection.send(pb.PluginToCore(hello=hello))
        pool = ThreadPoolExecutor(
            max_workers=manifest.limits.max_concurrent_calls, thread_name_prefix="naga-tool"
        )
        calls: set[Future[None]] = set()
        code = 0
        try:
            for frame in connection.frames():
                which = frame.WhichOneof("frame")
                if which == "ping":
                    connection.send(pb.PluginToCore(pong=pb.Pong(nonce=frame.ping.nonce)))
                elif which == "invoke":
                    call = pool.submit(self._call, connection, manifest, frame.invoke)
                    calls.add(call)
                    call.add_done_callback(calls.discard)
                elif which == "renewal":
                    # The token this worker holds is about to expire: the
                    # core sent the next (capability_token() reads it here).
                    os.environ[TOKEN_ENV] = base64.b64encode(frame.renewal.token).decode("ascii")
                elif which == "shutdown":
                    break
        except (FrameError, OSError) as exc:
            sys.stderr.write(f"plugin {self.name}: the connection to the core failed: {exc}\n")
            code = 1
        # Calls in flight get a moment to finish. A tool stuck for longer must
        # not keep the worker alive: the core may be gone (an orphan would
        # spin forever) or is about to kill it anyway.
        _, stuck = wait(list(calls), timeout=SHUTDOWN_GRACE_S)
        if stuck:
            sys.stderr.write(f"plugin {self.name}: {len(stuck)} call(s) still running; exiting\n")
            sys.stderr.flush()
            os._exit(STUCK_EXIT_CODE)
        pool.shutdown(wait=True, cancel_futures=True)
        return code

    def _call(self, connection: Connection, manifest: Manifest, invoke: pb.Invoke) -> None:
        call = Call(connection, invoke.call_id)
        token = running(call)
        try:
            frame = pb.PluginToCore(**self._answer(manifest, invoke))
        finally:
            done(token)
        # If the core is gone the answer cannot leave; the main loop ends too.
        with contextlib.suppress(FrameError, OSError):
            call.answer(frame)

    def _answer(self, manifest: Manifest, call: pb.Invoke) -> dict[str, Any]:
        def error(kind: pb.ToolErrorKind.ValueType, message: str) -> dict[str, Any]:
            text = " ".join(message.split())[:_MAX_MESSAGE_CHARS]
            return {"error": pb.ToolError(call_id=call.call_id, kind=kind, message=text)}

        spec = manifest.tool(call.tool)
        typed = self._typed.get(call.tool)
        if spec is not None and typed is not None:
            return self._answer_typed(typed, call, error)
        fn = self._tools.get(call.tool)
        if spec is None or fn is None:
            return error(pb.TOOL_ERROR_KIND_UNKNOWN_TOOL, f"{self.name} has no tool {call.tool!r}")
        try:
            arguments = check_arguments(spec, call.arguments_json)
        except InvalidArguments as exc:
            return error(pb.TOOL_ERROR_KIND_INVALID_ARGUMENTS, str(exc))
        try:
            value = fn(**arguments)
        except ToolFailed as exc:
            return error(pb.TOOL_ERROR_KIND_FAILED, str(exc) or type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - any tool failure is the caller's answer
            return error(pb.TOOL_ERROR_KIND_FAILED, f"{type(exc).__name__}: {exc}")
        try:
            text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            return error(pb.TOOL_ERROR_KIND_INTERNAL, f"{call.tool} returned no JSON value: {exc}")
        if len(text.encode()) > PLUGIN_MAX_FRAME_BYTES - _FRAME_OVERHEAD:
            return error(pb.TOOL_ERROR_KIND_INTERNAL, f"{call.tool} returned a result too large")
        return {"result": pb.Result(call_id=call.call_id, result_json=text)}

    @staticmethod
    def _answer_typed(
        fn: Callable[[pb.Invoke], pb.Result],
        call: pb.Invoke,
        error: Callable[[pb.ToolErrorKind.ValueType, str], dict[str, Any]],
    ) -> dict[str, Any]:
        if call.WhichOneof("payload") is None:
            return error(pb.TOOL_ERROR_KIND_INVALID_ARGUMENTS, f"{call.tool} takes a payload")
        try:
            result = fn(call)
        except ToolFailed as exc:
            return error(pb.TOOL_ERROR_KIND_FAILED, str(exc) or type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - any tool failure is the caller's answer
            return error(pb.TOOL_ERROR_KIND_FAILED, f"{type(exc).__name__}: {exc}")
        result.call_id = call.call_id
        if result.WhichOneof("payload") is None:
            return error(pb.TOOL_ERROR_KIND_INTERNAL, f"{call.tool} answered no payload")
        if result.ByteSize() > PLUGIN_MAX_FRAME_BYTES - _FRAME_OVERHEAD:
            return error(pb.TOOL_ERROR_KIND_INTERNAL, f"{call.tool} returned a result too large")
        return {"result": result}

    # --- for tools -------------------------------------------------------------------

    @staticmethod
    def current_call() -> Call:
        """The call the calling tool runs for, to send its progress
        (:meth:`Call.progress`) before it returns. Only inside a tool, on
        the thread it was called on; the object may then go to any thread."""
        return current_call()

    @staticmethod
    def work_dir() -> str:
        """The plugin's one writable directory (its working directory)."""
        return os.getcwd()

    @staticmethod
    def capability_token() -> bytes | None:
        """The token the core minted for this worker: role ``plugin``, the
        manifest's tools, their highest risk. It expires (the core sends the
        next one before it does, and this returns the latest) and is revoked
        when the worker ends. Present it to the core with
        ``naga.sdk.Client.connect(Plugin.core_socket(), token)``."""
        raw = os.environ.get(TOKEN_ENV)
        if not raw:
            return None
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise PluginSetupError(f"{TOKEN_ENV} is not base64") from None

    @staticmethod
    def core_socket() -> str | None:
        """The core's socket, for plugins whose manifest asks for ``core``."""
        return os.environ.get(CORE_SOCKET_ENV)


def _check_signature(spec: ToolSpec, fn: Callable[..., object]) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise PluginSetupError(f"tool {spec.name}: cannot read its signature: {exc}") from None
    names: list[str] = []
    for p in signature.parameters.values():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise PluginSetupError(f"tool {spec.name}: parameter {p.name!r} must be a plain name")
        names.append(p.name)
        param = spec.param(p.name)
        if param is None:
            raise PluginSetupError(f"tool {spec.name}: parameter {p.name!r} is not in the manifest")
        has_default = p.default is not p.empty
        if param.required and has_default:
            raise PluginSetupError(
                f"tool {spec.name}: {p.name!r} is required in the manifest but has a default"
            )
        if not param.required and not has_default:
            raise PluginSetupError(
                f"tool {spec.name}: {p.name!r} is optional in the manifest but has no default"
            )
    missing = [p.name for p in spec.params if p.name not in names]
    if missing:
        raise PluginSetupError(f"tool {spec.name}: the function lacks parameters {missing}")


__all__ = ["SDK_VERSION", "SETUP_EXIT_CODE", "Plugin"]
