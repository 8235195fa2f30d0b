"""Where the gateway's trio loop meets grpc.aio's asyncio loop (ADR 0038).

grpcio has no trio support; its asyncio API holds no thread per call, which
the gateway needs (one turn stream is open per waiting message, 200 and
more at once). So one thread runs an asyncio loop for every call to the
core, and trio tasks await coroutines on it: :meth:`AsyncioThread.run`
hands a coroutine over and sleeps on a trio event until it is done, and
:meth:`AsyncioThread.each` pushes a stream's messages to a trio task as they
arrive, so a waiting stream costs a parked coroutine, not a thread. A
cancelled trio task cancels its coroutine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar, cast

import attrs
import trio

T = TypeVar("T")

#: Longest the closing coroutine and the thread's exit may take.
_CLOSE_S = 5.0
#: Items of one iteration pushed ahead of what the trio task has handled.
_WINDOW = 16


@attrs.frozen
class _Pushed(Generic[T]):
    """One step of an iteration handed to trio: an item, its end, or its failure."""

    item: T | None = None
    end: bool = False
    failure: Exception | None = None


class AsyncioThread:
    """One asyncio loop in a daemon thread, started at the first :meth:`run`
    and stopped by :meth:`close` (which a gateway's owner calls once its
    trio run is over)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=_serve, args=(loop, ready), name=self._name, daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """``coroutine``'s result (or exception), run on the asyncio loop."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._started())
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def wake(_: concurrent.futures.Future[T]) -> None:
            # The trio run may be over when a cancelled coroutine finishes.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        future.add_done_callback(wake)
        try:
            await done.wait()
        finally:
            if not future.done():
                future.cancel()
        return future.result()

    async def each(
        self,
        items: Callable[[], AsyncIterator[T]],
        on_item: Callable[[T], Awaitable[None]],
    ) -> None:
        """Iterate ``items()`` on the asyncio loop and await ``on_item`` in
        trio for each item, in order; raises what the iteration raises.

        The loop pushes each item as it arrives (one wake-up of trio per
        item, none of the loop: a pull per item would cost a hop each way),
        at most ``_WINDOW`` ahead of what trio has handled. Cancelling the
        trio task cancels the iteration."""
        loop = self._started()
        token = trio.lowlevel.current_trio_token()
        send, receive = trio.open_memory_channel[_Pushed[T]](_WINDOW + 1)
        credits = asyncio.Semaphore(_WINDOW)

        def push(pushed: _Pushed[T]) -> None:
            def put() -> None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    send.send_nowait(pushed)

            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(put)

        async def pump() -> None:
            try:
                async for item in items():
                    await credits.acquire()
                    push(_Pushed(item=item))
            except Exception as exc:  # noqa: BLE001 - handed over to the trio task, raised there
                push(_Pushed(failure=exc))
            else:
                push(_Pushed(end=True))

        future = asyncio.run_coroutine_threadsafe(pump(), loop)
        try:
            async with receive:
                async for pushed in receive:
                    if pushed.failure is not None:
                        raise pushed.failure
                    if pushed.end:
                        return
                    await on_item(cast("T", pushed.item))
                    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                        loop.call_soon_threadsafe(credits.release)
        finally:
            future.cancel()

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the asyncio loop, not waiting for it (nothing if
        the loop never started)."""
        with self._lock:
            loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile
                loop.call_soon_threadsafe(fn)

    def close(self, last: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        """Run ``last()`` on the loop (a channel's ``close``), then stop the
        loop and join its thread. Blocking: call it outside trio."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if last is not None:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                asyncio.run_coroutine_threadsafe(last(), loop).result(_CLOSE_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_CLOSE_S)


def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


__all__ = ["AsyncioThread"]
