"""The embedded default model: a local OpenAI-compatible server in a sandbox.

With no provider configured, Naga still answers (SPEC section 4, L1): the
core starts llama-cpp-python's server with the small instruct model from the
cache (:mod:`naga_core._localmodel_assets`) and talks to it exactly as to
any OpenAI-compatible provider: ``base_url`` + ``model``, no key. Usage::

    with sandbox.Forker() as forker:  # the caller's: it forks the server
        async with local_model(LocalModelSettings.from_cache(), forker) as endpoint:
            ...  # POST f"{endpoint.base_url}/chat/completions", model=endpoint.model

A supervisor runs :func:`serve_local_model` in its nursery instead
(``await nursery.start(...)``), which also surfaces a server crash. Leaving
the block, or cancelling the task, stops the server with SIGTERM and then
SIGKILL after a grace period. Readiness is the server answering
``GET /v1/models`` with the model's name, polled until a deadline; the
server exiting first, or the deadline passing, raises with the end of the
server's log.

Like every process but the core, the server runs under the sandbox
(``sandbox.Profile.model_server``; target
``naga_plugins.localmodel.llama:main``): rlimits, no_new_privs, a private
network and mount namespace, Landlock, a seccomp allowlist. The core binds
the loopback socket it serves on and passes it in, so the server needs no
network of its own; it gets the read end of a lifeline pipe and stops when
the core is gone, so a core killed outright does not leave a model holding
half a gigabyte; its environment is scrubbed (llama-cpp-python's settings
read variables such as ``API_KEY`` or ``N_GPU_LAYERS``, and nothing the
owner's shell exports should change how the model is served).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
import tempfile
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import trio

import sandbox

if TYPE_CHECKING:
    import httpx

from naga_core._localmodel_assets import (
    DEFAULT_MODEL,
    ChecksumMismatch,
    LocalModelError,
    ModelMissing,
    ModelSpec,
    cache_root,
    model_path,
    require_model,
)
from naga_core.supervisor import sandboxed, wait_exit

_logger = logging.getLogger("naga.localmodel")

#: The sandbox target that runs llama-cpp-python's server.
SERVER_TARGET = "naga_plugins.localmodel.llama:main"
#: The Python package that target needs (the ``[local]`` extra).
SERVER_PACKAGE = "llama_cpp"
#: Set in the server's environment (the only name its profile allows): idle
#: OpenMP workers sleep instead of spinning on a shared CPU.
_SERVER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
_LOG_TAIL_LINES = 30
_POLL_FIRST_S = 0.05
_POLL_MAX_S = 0.5
_POLL_REQUEST_TIMEOUT_S = 2.0


class LocalModelNotReady(LocalModelError):
    """The server did not answer ``GET /v1/models`` before the deadline."""


class LocalModelExited(LocalModelError):
    """The server process ended, before it was ready or while serving.

    ``returncode`` is its exit code, or minus the signal that ended it (as
    in ``subprocess``); ``cause`` says how it ended in words (the seccomp
    filter, an rlimit, a crash).
    """

    def __init__(self, message: str, returncode: int, cause: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.cause = cause


class LocalModelSandboxFailed(LocalModelError):
    """The server's sandbox could not be set up: a layer this kernel lacks
    (and degraded mode not allowed), or a setup step that failed."""


@dataclass(frozen=True, slots=True)
class LocalModelEndpoint:
    """Where the running model answers: an OpenAI-compatible API, no key."""

    #: e.g. ``http://127.0.0.1:41234/v1``; append ``/chat/completions``.
    base_url: str
    #: The ``model`` field requests must carry.
    model: str
    pid: int
    log_path: Path
    #: When the server process started, nanoseconds since the Unix epoch.
    started_ns: int = 0
    #: Sandbox layers this kernel could not give (degraded mode only).
    degraded: tuple[str, ...] = ()


def _default_threads() -> int:
    # A 0.5B model is memory-bound: past 4 threads it gains nothing and
    # takes cores from the rest of Naga.
    return max(1, min(4, len(os.sched_getaffinity(0))))


#: The embedded model's context window (tokens), its server's ``--n_ctx``:
#: the prompt budget of a turn on it is cut from this.
LOCAL_CONTEXT_WINDOW = 4096


@dataclass(frozen=True, slots=True)
class LocalModelSettings:
    """How to run the server; :meth:`from_cache` gives the shipped defaults."""

    model_path: Path
    #: The name the server answers to (``--model_alias``).
    model_name: str
    #: A modest context keeps the KV cache (and so memory) small.
    n_ctx: int = LOCAL_CONTEXT_WINDOW
    n_threads: int = field(default_factory=_default_threads)
    #: None: the chat template embedded in the GGUF (it knows the tool format).
    chat_format: str | None = None
    #: From launch to the server's first answer over HTTP (loading the model).
    ready_timeout_s: float = 120.0
    #: The sandbox's own setup (the child's report that every layer holds),
    #: apart from the above: a test asking for a quick HTTP deadline must
    #: not turn a slow setup on a loaded machine into a launch failure.
    launch_timeout_s: float = 30.0
    stop_grace_s: float = 5.0
    #: RLIMIT_AS of the server. It maps 1.5-1.6 GiB at its peak with the
    #: default model and context (docs/adr/0005); the limit leaves room for
    #: that and makes a runaway allocation fail in the server instead of
    #: taking the machine's memory.
    memory_limit_bytes: int = sandbox.MODEL_SERVER_ADDRESS_SPACE
    #: CPUs it may use in every 100 ms (its cgroup's quota); None: its
    #: thread count, so the threads llama.cpp or OpenMP start beyond
    #: ``n_threads`` share those CPUs instead of taking more.
    cpu_max: float | None = None
    #: Its processes and threads at most (its cgroup's pids.max): uvicorn,
    #: the thread pools, llama.cpp's workers; far below a runaway.
    max_tasks: int = 256
    #: Where the server's output goes; None: a temporary file removed on exit.
    log_path: Path | None = None
    #: The server's one writable directory; None: a temporary one.
    work_dir: Path | None = None
    #: Run with the sandbox layers this kernel has, when some are missing.
    allow_degraded: bool = False
    #: What this kernel offers (``sandbox.detect()``); None: detect at launch.
    kernel: sandbox.KernelReport | None = None
    #: The sandbox target (``module:function``); tests swap in a stand-in.
    server_target: str = SERVER_TARGET

    @classmethod
    def from_cache(
        cls, root: Path | None = None, spec: ModelSpec = DEFAULT_MODEL, **overrides: Any
    ) -> LocalModelSettings:
        """Settings for ``spec`` assembled in the cache; :class:`ModelMissing`
        (saying to run ``make``) when it is not there."""
        path = model_path(cache_root() if root is None else root, spec)
        require_model(path, spec)
        return cls(model_path=path, model_name=spec.name, **overrides)

    def server_args(self) -> list[str]:
        """``llama_cpp.server``'s arguments (it serves the socket it is given)."""
        args = [
            "--model", str(self.model_path),
            "--model_alias", self.model_name,
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            # True keeps logits for every prompt position: 2-3 GB for nothing.
            "--logits_all", "False",
            "--n_gpu_layers", "0",
            # Pinning the model in RAM is the sandbox's to refuse (seccomp
            # denies mlock); not asking keeps a warning out of the log.
            "--use_mlock", "False",
        ]  # fmt: skip
        if self.chat_format is not None:
            args += ["--chat_format", self.chat_format]
        return args

    def profile(self, work_dir: Path) -> sandbox.Profile:
        """The server's sandbox: reads the model's directory, writes ``work_dir``."""
        return sandbox.Profile.model_server(
            self.model_path.parent,
            work_dir=work_dir,
            rlimits=sandbox.Rlimits(
                address_space=self.memory_limit_bytes,
                open_files=256,
                file_size=sandbox.MODEL_SERVER_LOG_LIMIT,
            ),
            allow_degraded=self.allow_degraded,
        )


def loopback_listener() -> socket.socket:
    """A TCP socket listening on a free port of 127.0.0.1, for the server.

    Bound here, not by the server: no port can be taken between choosing it
    and binding it, and the sandbox needs no right to bind.
    """
    return socket.create_server(("127.0.0.1", 0), backlog=64)


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` (empty if unreadable)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16_384))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


_RUN_MAKE = "run `make` to install the [local] extra"


def _check_server_installed(settings: LocalModelSettings) -> None:
    module = settings.server_target.partition(":")[0]
    needed = [module.partition(".")[0]]
    if settings.server_target == SERVER_TARGET:
        needed.append(SERVER_PACKAGE)
    for top in needed:
        if importlib.util.find_spec(top) is None:
            raise LocalModelError(
                f"the local model server ({settings.server_target}) needs {top}, which is "
                f"not installed in this environment; {_RUN_MAKE}"
            )


def server_cgroup(
    settings: LocalModelSettings, kernel: sandbox.KernelReport
) -> sandbox.Cgroup | None:
    """The server's own cgroup: its CPU quota, a memory ceiling of its
    address-space limit (resident pages and the model's page cache count
    against it, kernel memory too), its task count; None where the kernel
    offers no cgroups (``naga doctor`` says why) or one cannot be made."""
    support = kernel.cgroups
    if support is None or not support.usable:
        return None
    limits = sandbox.CgroupLimits(
        cpus=settings.cpu_max or float(settings.n_threads),
        memory_bytes=settings.memory_limit_bytes,
        pids=settings.max_tasks,
    )
    try:
        return sandbox.Cgroup.create(support, "local-model", limits)
    except OSError as exc:
        _logger.warning("local model server: runs without a cgroup of its own: %s", exc)
        return None


def _launch(
    settings: LocalModelSettings,
    forker: sandbox.Forker,
    *,
    work_dir: Path,
    listener: socket.socket,
    lifeline: int,
    log: IO[bytes],
    log_path: Path,
) -> sandbox.Sandboxed:
    """Start the sandboxed server (blocking: in a thread) in its own cgroup;
    it serves ``listener``."""
    args = [str(lifeline), str(listener.fileno()), repr(settings.stop_grace_s)]
    kernel = settings.kernel or sandbox.detect()
    cgroup = server_cgroup(settings, kernel)
    try:
        return sandbox.launch(
            settings.profile(work_dir),
            settings.server_target,
            [*args, *settings.server_args()],
            forker=forker,
            pass_fds=[lifeline, listener.fileno()],
            env=_SERVER_ENV,
            stdout=log,
            stderr=log,
            kernel=kernel,
            ready_timeout=settings.launch_timeout_s,
            cgroup=cgroup,
        )
    except BaseException as e:
        if cgroup is not None:  # the child's handle owns it only once launched
            with suppress(OSError):
                cgroup.remove()
        if isinstance(e, sandbox.LayerUnavailable):
            raise LocalModelSandboxFailed(f"the local model server cannot be sandboxed: {e}") from e
        if isinstance(e, sandbox.ProfileInvalid):
            raise LocalModelSandboxFailed(
                f"the local model server's sandbox is invalid: {e}"
            ) from e
        if isinstance(e, sandbox.LaunchFailed):
            # The server's module did not import (llama_cpp missing): make installs it.
            hint = f"; {_RUN_MAKE}" if e.layer == sandbox.Layer.TARGET.value else ""
            raise LocalModelSandboxFailed(
                f"the local model server did not start in its sandbox: {e}{hint}; "
                f"the end of its log ({log_path}):\n{log_tail(log_path)}"
            ) from e
        raise


def _open_log(path: Path) -> IO[bytes]:
    # 0600: what the server logs (templates, requests) is the owner's business.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "ab")


def _returncode(end: sandbox.Exit) -> int:
    if end.code is not None:
        return end.code
    return -(end.signal or 0)


async def serve_local_model(
    settings: LocalModelSettings,
    forker: sandbox.Forker,
    *,
    task_status: trio.TaskStatus[LocalModelEndpoint] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the server until cancelled; ``task_status.started(endpoint)`` once it
    answers. For a supervisor: ``endpoint = await nursery.start(serve_local_model, s, forker)``;
    ``forker`` (the supervisor's :class:`sandbox.Forker`) forks the server.

    Raises :class:`LocalModelExited` if the server exits by itself, before
    or after it was ready, so the supervising nursery learns of a crash;
    :class:`LocalModelSandboxFailed` when its sandbox cannot be set up.
    Cancelling stops it: SIGTERM, then SIGKILL after ``stop_grace_s``.
    """
    if not settings.model_path.is_file():
        raise ModelMissing(f"no model file at {settings.model_path}; run `make` to assemble it")
    _check_server_installed(settings)
    with tempfile.TemporaryDirectory(prefix="naga-localmodel-") as tmp:
        log_path = settings.log_path or Path(tmp) / "server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        work_dir = settings.work_dir or Path(tmp) / "work"
        work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Only the core holds the write end: the server sees end-of-file on
        # its read end when the core is gone, however it went.
        lifeline_r, lifeline_w = os.pipe()
        try:
            with loopback_listener() as listener, _open_log(log_path) as log:
                port: int = listener.getsockname()[1]
                started_ns = time.time_ns()
                launch: Callable[[], sandbox.Sandboxed] = partial(
                    _launch,
                    settings,
                    forker,
                    work_dir=work_dir,
                    listener=listener,
                    lifeline=lifeline_r,
                    log=log,
                    log_path=log_path,
                )
                try:
                    async with sandboxed(launch) as server:
                        # The server holds its own copies; ours would keep
                        # the lifeline open and the port bound after it ends.
                        os.close(lifeline_r)
                        lifeline_r = -1
                        listener.close()
                        await _run(
                            server,
                            settings,
                            port=port,
                            log_path=log_path,
                            started_ns=started_ns,
                            task_status=task_status,
                        )
                finally:
                    if lifeline_r != -1:
                        os.close(lifeline_r)
        finally:
            os.close(lifeline_w)


async def _run(
    server: sandbox.Sandboxed,
    settings: LocalModelSettings,
    *,
    port: int,
    log_path: Path,
    started_ns: int,
    task_status: trio.TaskStatus[LocalModelEndpoint],
) -> None:
    # This task owns the process: whatever ends it (cancellation, a failed
    # start, the server's own exit) goes through the stop below.
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        await _await_ready(server, base_url, settings, log_path)
        task_status.started(
            LocalModelEndpoint(
                base_url=base_url,
                model=settings.model_name,
                pid=server.pid,
                log_path=log_path,
                started_ns=started_ns,
                degraded=tuple(str(d) for d in server.degraded),
            )
        )
        end = await wait_exit(server)
        raise LocalModelExited(
            f"the local model server {end} while serving; "
            f"the end of its log ({log_path}):\n{log_tail(log_path)}",
            _returncode(end),
            end.cause,
        )
    finally:
        with trio.CancelScope(shield=True):
            await _stop(server, settings.stop_grace_s)


@asynccontextmanager
async def local_model(
    settings: LocalModelSettings, forker: sandbox.Forker
) -> AsyncGenerator[LocalModelEndpoint]:
    """Run the server for the duration of the block; yield where it answers.
    ``forker`` forks it, and is to be closed only after the block.

    A failed start raises the :class:`LocalModelError` itself. If the server
    dies while the block runs, the block is cancelled and the error arrives
    in an ExceptionGroup, as from any trio nursery.
    """
    failure: LocalModelError | None = None
    async with trio.open_nursery() as nursery:
        try:
            endpoint: LocalModelEndpoint = await nursery.start(serve_local_model, settings, forker)
        except LocalModelError as e:
            failure = e
        else:
            try:
                yield endpoint
            finally:
                nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _stop(server: sandbox.Sandboxed, grace_s: float) -> None:
    """SIGTERM (uvicorn shuts down cleanly), SIGKILL if still there after the grace."""
    if server.poll() is None:
        with suppress(ProcessLookupError):
            os.kill(server.pid, signal.SIGTERM)
        with trio.move_on_after(grace_s):
            await wait_exit(server)
    server.kill()  # reaps; SIGKILL only if it is still running


async def _await_ready(
    server: sandbox.Sandboxed, base_url: str, settings: LocalModelSettings, log_path: Path
) -> None:
    ready = False
    with trio.move_on_after(settings.ready_timeout_s):
        async with trio.open_nursery() as race:
            race.start_soon(_cancel_on_exit, server, race.cancel_scope)
            await _poll_models(base_url, settings.model_name)
            ready = True
            race.cancel_scope.cancel()
    if ready:
        return
    tail = log_tail(log_path)
    end = server.poll()
    if end is not None:
        raise LocalModelExited(
            f"the local model server {end} before it was ready; "
            f"the end of its log ({log_path}):\n{tail}",
            _returncode(end),
            end.cause,
        )
    raise LocalModelNotReady(
        f"the local model server did not answer GET {base_url}/models within "
        f"{settings.ready_timeout_s:g} s; the end of its log ({log_path}):\n{tail}"
    )


async def _cancel_on_exit(server: sandbox.Sandboxed, scope: trio.CancelScope) -> None:
    await wait_exit(server)
    scope.cancel()


async def _poll_models(base_url: str, model_name: str) -> None:
    """Return once ``GET /models`` lists ``model_name``.

    Each attempt is bounded, so a server that accepts connections but
    never answers cannot hold one attempt past the caller's deadline by
    much; connection refusals are expected while the model loads.
    """
    # Imported here: only a start of the local model needs it, and it costs
    # every core start 0.1 s of CPU (httpx pulls in click and pygments).
    import httpx  # noqa: PLC0415

    delay = _POLL_FIRST_S
    # trust_env=False: a proxy from the environment must not see loopback traffic.
    async with httpx.AsyncClient(
        base_url=base_url, timeout=_POLL_REQUEST_TIMEOUT_S, trust_env=False
    ) as client:
        while True:
            try:
                response = await client.get("/models")
                if response.status_code == 200 and _lists_model(response, model_name):
                    return
            except httpx.TransportError:
                pass
            await trio.sleep(delay)
            delay = min(_POLL_MAX_S, delay * 2)


def _lists_model(response: httpx.Response, model_name: str) -> bool:
    try:
        body: object = response.json()
    except ValueError:
        return False
    data = cast("dict[str, object]", body).get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return False
    entries = cast("list[object]", data)
    return any(
        isinstance(entry, dict) and cast("dict[str, object]", entry).get("id") == model_name
        for entry in entries
    )


__all__ = [
    "LOCAL_CONTEXT_WINDOW",
    "DEFAULT_MODEL",
    "ChecksumMismatch",
    "LocalModelEndpoint",
    "LocalModelError",
    "LocalModelExited",
    "LocalModelNotReady",
    "LocalModelSettings",
    "ModelMissing",
    "ModelSpec",
    "cache_root",
    "LocalModelSandboxFailed",
    "SERVER_PACKAGE",
    "SERVER_TARGET",
    "local_model",
    "log_tail",
    "loopback_listener",
    "model_path",
    "serve_local_model",
]
