"""The embedded default model: a local OpenAI-compatible server as a child process.

With no provider configured, Naga still answers (SPEC section 4, L1): the
core starts llama-cpp-python's server on loopback with the small instruct
model from the cache (:mod:`naga_core._localmodel_assets`) and talks to it
exactly as to any OpenAI-compatible provider: ``base_url`` + ``model``, no
key. Usage::

    async with local_model(LocalModelSettings.from_cache()) as endpoint:
        ...  # POST f"{endpoint.base_url}/chat/completions", model=endpoint.model

A supervisor runs :func:`serve_local_model` in its nursery instead
(``await nursery.start(...)``), which also surfaces a server crash. Leaving
the block, or cancelling the task, stops the server with SIGTERM and then
SIGKILL after a grace period. Readiness is the server answering
``GET /v1/models`` with the model's name, polled until a deadline; the server exiting first, or
the deadline passing, raises with the end of the server's log.

The child watches its parent (a pidfd) and stops when it is gone, so a
core killed outright does not leave a model holding half a gigabyte; it
runs in its own session (a terminal's Ctrl-C reaches the core, which stops
it in order) and gets a scrubbed environment: llama-cpp-python's settings
read environment variables such as ``API_KEY`` or ``N_GPU_LAYERS``, and nothing
the owner's shell happens to export should change how the model is served.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import trio

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

#: Runs in the child before the server module: watch the parent process
#: and stop when it is gone, optionally cap the address space, then become
#: ``-m module``. Not PR_SET_PDEATHSIG: it fires when the parent *thread*
#: exits, and trio spawns processes from worker threads that retire when
#: idle, which killed a healthy server ten seconds in. A pidfd names the
#: whole process; checking the parent after opening it closes the race with
#: a parent that died during the fork.
_BOOTSTRAP = """\
import os, resource, runpy, select, signal, sys, threading, time
parent = int(sys.argv[1])
parent_fd = os.pidfd_open(parent)
if os.getppid() != parent:
    sys.exit("naga local model: parent gone before start")
def orphaned():
    select.select([parent_fd], [], [])
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(float(sys.argv[2]))
    os.kill(os.getpid(), signal.SIGKILL)
threading.Thread(target=orphaned, name="naga-parent-watch", daemon=True).start()
limit = int(sys.argv[3])
if limit > 0:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
module = sys.argv[4]
sys.argv = [module, *sys.argv[5:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""

_LOG_TAIL_LINES = 30
_POLL_FIRST_S = 0.05
_POLL_MAX_S = 0.5
_POLL_REQUEST_TIMEOUT_S = 2.0


class LocalModelNotReady(LocalModelError):
    """The server did not answer ``GET /v1/models`` before the deadline."""


class LocalModelExited(LocalModelError):
    """The server process exited before it was ready."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


@dataclass(frozen=True, slots=True)
class LocalModelEndpoint:
    """Where the running model answers: an OpenAI-compatible API, no key."""

    #: e.g. ``http://127.0.0.1:41234/v1``; append ``/chat/completions``.
    base_url: str
    #: The ``model`` field requests must carry.
    model: str
    pid: int
    log_path: Path


def _default_threads() -> int:
    # A 0.5B model is memory-bound: past 4 threads it gains nothing and
    # takes cores from the rest of Naga.
    return max(1, min(4, len(os.sched_getaffinity(0))))


@dataclass(frozen=True, slots=True)
class LocalModelSettings:
    """How to run the server; :meth:`from_cache` gives the shipped defaults."""

    model_path: Path
    #: The name the server answers to (``--model_alias``).
    model_name: str
    #: The interpreter that has llama-cpp-python[server] installed.
    python: str = sys.executable
    #: A modest context keeps the KV cache (and so memory) small.
    n_ctx: int = 4096
    n_threads: int = field(default_factory=_default_threads)
    #: None: the chat template embedded in the GGUF (it knows the tool format).
    chat_format: str | None = None
    ready_timeout_s: float = 120.0
    stop_grace_s: float = 5.0
    #: RLIMIT_AS of the server process, 0 for none. The server maps about
    #: 1.6-1.9 GiB at its peak with the default model and context (docs/adr/0005);
    #: the cap leaves room for that and makes a runaway allocation fail in the
    #: child instead of taking the machine's memory.
    memory_limit_bytes: int = 4 << 30
    #: Where the server's output goes; None: a temporary file removed on exit.
    log_path: Path | None = None
    #: The module run as ``python -m``; tests swap in a stand-in server.
    server_module: str = "llama_cpp.server"
    #: Added to the scrubbed environment (e.g. ``PYTHONPATH`` for a stand-in).
    extra_env: Mapping[str, str] = field(default_factory=dict[str, str])

    @classmethod
    def from_cache(
        cls, root: Path | None = None, spec: ModelSpec = DEFAULT_MODEL, **overrides: Any
    ) -> LocalModelSettings:
        """Settings for ``spec`` assembled in the cache; :class:`ModelMissing`
        (saying to run ``make``) when it is not there."""
        path = model_path(cache_root() if root is None else root, spec)
        require_model(path, spec)
        return cls(model_path=path, model_name=spec.name, **overrides)

    def server_args(self, port: int) -> list[str]:
        args = [
            "--model", str(self.model_path),
            "--model_alias", self.model_name,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            # True keeps logits for every prompt position: 2-3 GB for nothing.
            "--logits_all", "False",
            "--n_gpu_layers", "0",
        ]  # fmt: skip
        if self.chat_format is not None:
            args += ["--chat_format", self.chat_format]
        return args


def server_command(settings: LocalModelSettings, port: int) -> list[str]:
    """The child's command line: the bootstrap above, then the server module."""
    return [
        settings.python, "-c", _BOOTSTRAP,
        str(os.getpid()), repr(settings.stop_grace_s), str(settings.memory_limit_bytes),
        settings.server_module, *settings.server_args(port),
    ]  # fmt: skip


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _child_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
        "LANG": "C.UTF-8",
        # Idle OpenMP workers sleep instead of spinning on a shared CPU.
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra)
    return env


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


def _check_server_installed(settings: LocalModelSettings) -> None:
    if settings.python != sys.executable:
        return  # another interpreter: its own import error lands in the log
    top = settings.server_module.partition(".")[0]
    if importlib.util.find_spec(top) is None:
        raise LocalModelError(
            f"the local model server ({settings.server_module}) is not installed in "
            f"{sys.prefix}; run `make` to install the [local] extra"
        )


async def serve_local_model(
    settings: LocalModelSettings,
    *,
    task_status: trio.TaskStatus[LocalModelEndpoint] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the server until cancelled; ``task_status.started(endpoint)`` once it
    answers. For a supervisor: ``endpoint = await nursery.start(serve_local_model, s)``.

    Raises :class:`LocalModelExited` if the server exits by itself, before
    or after it was ready, so the supervising nursery learns of a crash.
    Cancelling stops it: SIGTERM, then SIGKILL after ``stop_grace_s``.
    """
    if not settings.model_path.is_file():
        raise ModelMissing(f"no model file at {settings.model_path}; run `make` to assemble it")
    _check_server_installed(settings)
    with tempfile.TemporaryDirectory(prefix="naga-localmodel-") as tmp:
        log_path = settings.log_path or Path(tmp) / "server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        port = free_loopback_port()
        with log_path.open("ab") as log:
            process = await trio.lowlevel.open_process(
                server_command(settings, port),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_env(settings.extra_env),
                start_new_session=True,
            )
        # This task owns the process: whatever ends it (cancellation, a
        # failed start, the server's own exit) goes through the stop below.
        try:
            base_url = f"http://127.0.0.1:{port}/v1"
            await _await_ready(process, base_url, settings, log_path)
            task_status.started(
                LocalModelEndpoint(
                    base_url=base_url, model=settings.model_name, pid=process.pid, log_path=log_path
                )
            )
            returncode = await process.wait()
            raise LocalModelExited(
                f"the local model server exited with status {returncode} while serving; "
                f"the end of its log ({log_path}):\n{log_tail(log_path)}",
                returncode,
            )
        finally:
            with trio.CancelScope(shield=True):
                await _stop(process, settings.stop_grace_s)


@asynccontextmanager
async def local_model(settings: LocalModelSettings) -> AsyncGenerator[LocalModelEndpoint]:
    """Run the server for the duration of the block; yield where it answers.

    A failed start raises the :class:`LocalModelError` itself. If the server
    dies while the block runs, the block is cancelled and the error arrives
    in an ExceptionGroup, as from any trio nursery.
    """
    failure: LocalModelError | None = None
    async with trio.open_nursery() as nursery:
        try:
            endpoint: LocalModelEndpoint = await nursery.start(serve_local_model, settings)
        except LocalModelError as e:
            failure = e
        else:
            try:
                yield endpoint
            finally:
                nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _stop(process: trio.Process, grace_s: float) -> None:
    """SIGTERM (uvicorn shuts down cleanly), SIGKILL if still there after the grace."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(grace_s):
            await process.wait()
        if process.returncode is None:
            process.kill()
    await process.wait()


async def _await_ready(
    process: trio.Process, base_url: str, settings: LocalModelSettings, log_path: Path
) -> None:
    ready = False
    with trio.move_on_after(settings.ready_timeout_s):
        async with trio.open_nursery() as race:
            race.start_soon(_cancel_on_exit, process, race.cancel_scope)
            await _poll_models(base_url, settings.model_name)
            ready = True
            race.cancel_scope.cancel()
    if ready:
        return
    tail = log_tail(log_path)
    if process.returncode is not None:
        raise LocalModelExited(
            f"the local model server exited with status {process.returncode} before it "
            f"was ready; the end of its log ({log_path}):\n{tail}",
            process.returncode,
        )
    raise LocalModelNotReady(
        f"the local model server did not answer GET {base_url}/models within "
        f"{settings.ready_timeout_s:g} s; the end of its log ({log_path}):\n{tail}"
    )


async def _cancel_on_exit(process: trio.Process, scope: trio.CancelScope) -> None:
    await process.wait()
    scope.cancel()


async def _poll_models(base_url: str, model_name: str) -> None:
    """Return once ``GET /models`` lists ``model_name``.

    Each attempt is bounded, so a server that accepts connections but
    never answers cannot hold one attempt past the caller's deadline by
    much; connection refusals are expected while the model loads.
    """
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
    "free_loopback_port",
    "local_model",
    "log_tail",
    "model_path",
    "serve_local_model",
    "server_command",
]
