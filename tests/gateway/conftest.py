"""A fake core on a Unix socket and a gateway in front of it, per test."""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import trio

from naga_gateway import Gateway, GatewayConfig, GrpcCore
from tests.fakes.turn_core import FakeCore

T = TypeVar("T")


@pytest.fixture
def fake_core() -> Iterator[tuple[FakeCore, str]]:
    # A short path: Unix socket paths are limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="gw-") as tmp:
        path = str(Path(tmp) / "core.sock")
        core = FakeCore()
        core.serve(path)
        try:
            yield core, path
        finally:
            core.stop()


def run_gateway(
    socket: str,
    body: Callable[[Gateway], Awaitable[T]],
    config: GatewayConfig | None = None,
) -> T:
    """Run ``body`` against a gateway serving on a free port, in trio."""

    async def main() -> T:
        core = GrpcCore(socket, "Capability test")
        gateway = Gateway(core, config or GatewayConfig(port=0))
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(gateway.serve)
                with trio.fail_after(30):
                    result = await body(gateway)
                nursery.cancel_scope.cancel()
            return result
        finally:
            core.close()

    return trio.run(main)
