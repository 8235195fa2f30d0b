"""The attacker plugin (tests/plugin_host/plugins/attacker): the penetration
attacks and the supervisor's trouble cases, run by a real sandboxed worker
under a real core. Everything is imported here, before the sandbox's filter."""

from __future__ import annotations

import base64
import ctypes
import errno
import os
import signal
import stat
import struct
import threading
import time

from naga.v1 import plugin_pb2 as pb
from naga_plugins import Plugin, ToolFailed
from tests.sandbox import _attacks

plugin = Plugin("attacker")
# PyDLL: the call keeps the GIL, so no other thread of the worker runs.
_gil_libc = ctypes.PyDLL(None)
_gil_libc.sleep.argtypes = (ctypes.c_uint,)


@plugin.tool("attacker.attack")
def attack(name: str, args: str = "") -> str:
    fn = _attacks.ATTACKS.get(name)
    if fn is None:
        raise ToolFailed(f"no attack {name!r}")
    try:
        return fn(*(args.split("\n") if args else ()))
    except _attacks.Escaped as exc:
        return f"ESCAPED: {exc}"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))


@plugin.tool("attacker.echo")
def echo(text: str) -> dict[str, object]:
    return {"text": text, "pid": os.getpid()}


@plugin.tool("attacker.leak")
def leak(step_mib: int) -> str:
    hoard: list[bytearray] = []
    while True:  # until the supervisor's memory ceiling ends the worker
        hoard.append(bytearray(b"\x01") * (step_mib << 20))  # touched, so resident
        time.sleep(0.02)


@plugin.tool("attacker.hold_gil")
def hold_gil(seconds: int) -> str:
    _gil_libc.sleep(seconds)
    return "woke"


def _core_socket() -> int:
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                return fd
        except OSError:
            continue
    raise ToolFailed("no socket found")


def _frame(message: pb.PluginToCore) -> bytes:
    body = message.SerializeToString()
    return struct.pack(">I", len(body)) + body


_BAD_FRAMES = {
    "oversize": struct.pack(">I", 1 << 31),
    "garbage": struct.pack(">I", 5) + b"\xff\xff\xff\xff\xff",
    "empty": struct.pack(">I", 0),
    "unknown_call": _frame(pb.PluginToCore(result=pb.Result(call_id=10**9, result_json="1"))),
    "second_hello": _frame(pb.PluginToCore(hello=pb.Hello())),
    # The first call of a fresh worker has id 1: answer it wrongly.
    "bad_json": _frame(pb.PluginToCore(result=pb.Result(call_id=1, result_json="{nope"))),
    "bad_error_kind": _frame(pb.PluginToCore(error=pb.ToolError(call_id=1, kind=99))),  # type: ignore[arg-type]
    "progress_unknown_call": _frame(
        pb.PluginToCore(progress=pb.Progress(call_id=10**9, text="hi"))
    ),
    # For a worker whose call 1 was answered already.
    "progress_answered": _frame(pb.PluginToCore(progress=pb.Progress(call_id=1, text="late"))),
}


@plugin.tool("attacker.bad_frame")
def bad_frame(kind: str) -> str:
    data = _BAD_FRAMES.get(kind)
    if data is None:
        raise ToolFailed(f"no bad frame {kind!r}")
    os.write(_core_socket(), data)
    time.sleep(30)  # the core ends the worker first
    return "not stopped"


@plugin.tool("attacker.chatter")
def chatter(frames: int) -> dict[str, int]:
    """Progress its caller takes none of: the core drops it, the call goes on."""
    call = plugin.current_call()
    for n in range(frames):
        call.progress(f"{n} ")
    return {"sent": frames}


@plugin.tool("attacker.token")
def token() -> dict[str, object]:
    raw = plugin.capability_token()
    return {
        "token": None if raw is None else base64.b64encode(raw).decode(),
        "core_socket": plugin.core_socket(),
    }


@plugin.tool("attacker.stop")
def stop() -> str:
    # Thread-directed: this thread starts the group stop itself. A
    # process-directed SIGSTOP may be taken by another thread while this one
    # still gets its answer out.
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    return "continued"


@plugin.tool("attacker.rendezvous")
def rendezvous() -> str:
    with open(os.path.join(plugin.work_dir(), "arrived"), "wb", buffering=0) as arrived:
        arrived.write(b"x")
    with open(os.path.join(plugin.work_dir(), "gate"), "rb", buffering=0) as gate:
        gate.read(1)
    return "passed"


@plugin.tool("attacker.exit")
def exit_now(code: int) -> str:
    os._exit(code)


main = plugin.main
