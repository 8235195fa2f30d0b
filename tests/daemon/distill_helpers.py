"""The ``memory.distill`` records of a real core, read through its ledger
API: an archive's distillation runs in the background (ADR 0050), so a test
waits for its record instead of reading it off the archive's answer."""

from __future__ import annotations

import os
from collections.abc import Generator
from contextlib import contextmanager

import pytest

from naga.sdk import Client
from naga.v1 import memory_pb2 as mmpb
from naga_core.agent import DISTILL, AgentConfig
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import PLUGINS, ServerThread, write_providers
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.plugin_host.conftest import STEADY

AGENT = AgentConfig(executors=1, turn_timeout_s=60).with_budgets(100_000)

#: Longest a test waits for a distillation's record (the fake model answers
#: at once once released; this bounds a broken test, it is not a timing).
WAIT_S = 60.0


@pytest.fixture
def provider_home(home: str, model_server: ServerThread) -> str:
    """A fresh home whose providers.json names the fake model."""
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    return home


@contextmanager
def distill_core(home: str) -> Generator[InProcessCore]:
    """A real core on ``home`` with its executor and provider plugin."""
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=STEADY)
    with core_in_thread(home, plugins=config, agent=AGENT) as core:
        yield core


def stop_core(core: InProcessCore) -> None:
    with core.client() as c:
        c.shutdown("test: stop")
    assert not core.join().failed


def wait_distilled(
    client: Client, session: str, from_seq: int, *, timeout: float = WAIT_S
) -> tuple[int, mmpb.MemoryDistillRecord]:
    """The first ``memory.distill`` record of ``session`` at or after
    ``from_seq``: its seq and body, as soon as the core has it durable (a
    ledger subscription, ended by the core's deadline if it never comes)."""
    events = client.subscribe(from_seq, kinds=[DISTILL], timeout=timeout)
    try:
        for event in events:
            if event.HasField("record"):
                body = mmpb.MemoryDistillRecord.FromString(event.record.payload)
                if body.session == session:
                    return event.record.seq, body
    finally:
        events.cancel()
    raise AssertionError(f"no memory.distill record of {session} from seq {from_seq}")


def distilled(client: Client, session: str, from_seq: int = 0) -> list[mmpb.MemoryDistillRecord]:
    """Every ``memory.distill`` record of ``session`` the ledger holds now."""
    out: list[mmpb.MemoryDistillRecord] = []
    seq = from_seq
    while page := client.records(seq, 500):
        for r in page:
            if r.kind == DISTILL:
                body = mmpb.MemoryDistillRecord.FromString(r.payload)
                if body.session == session:
                    out.append(body)
        seq = page[-1].seq + 1
    return out


__all__ = ["WAIT_S", "distilled", "wait_distilled"]
