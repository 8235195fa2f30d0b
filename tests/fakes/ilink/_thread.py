"""The fake server on a trio loop of its own thread, for tests whose core
runs elsewhere (a thread, a process): every access crosses to its loop."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any, TypeVar

import trio

from tests.fakes.ilink._server import FakeILink

T = TypeVar("T")


class ILinkThread:
    def __init__(self, server: FakeILink, token: trio.lowlevel.TrioToken) -> None:
        self.server = server
        self._token = token

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the server's loop (state is the loop's)."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def wait(self, fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
        """Await ``fn(*args)`` on the server's loop, within ``timeout``."""

        async def bounded() -> Any:
            with trio.fail_after(timeout):
                return await fn(*args)

        return trio.from_thread.run(bounded, trio_token=self._token)

    def until(self, check: Callable[[FakeILink], T], *, timeout: float = 60.0) -> T:
        """Wait (on the loop, woken by every request and send) until
        ``check(server)`` is truthy; its value."""

        async def poll() -> T:
            with trio.fail_after(timeout):
                while True:
                    value = check(self.server)
                    if value:
                        return value
                    await self.server.activity.wait()

        return trio.from_thread.run(poll, trio_token=self._token)


@contextmanager
def ilink_thread(**options: Any) -> Generator[ILinkThread]:
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                box["server"] = await nursery.start(FakeILink(**options).serve)
                box["token"] = trio.lowlevel.current_trio_token()
                box["scope"] = nursery.cancel_scope
                started.set()

        trio.run(main)

    thread = threading.Thread(target=run, name="fake-ilink", daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("the fake iLink server did not start")
    try:
        yield ILinkThread(box["server"], box["token"])
    finally:
        trio.from_thread.run_sync(box["scope"].cancel, trio_token=box["token"])
        thread.join(10)
