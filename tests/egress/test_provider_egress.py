"""The model-provider worker reaches its provider through the core's egress
proxy: the host providers.json names (a loopback address the owner wrote
is allowed: a local server), nothing else. ``0.0.0.0`` reaches a local
listener on Linux when dialled directly; through the proxy it is refused
as unspecified, journaled, and the turn fails with a clear error."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

from naga_core.plugins import PluginsConfig
from tests.agent.conftest import AGENT, ServerThread, model_server, write_providers
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply
from tests.plugin_host.conftest import STEADY

__all__ = ["model_server"]


def test_the_provider_worker_goes_through_the_proxy(model_server: ServerThread) -> None:
    root = tempfile.mkdtemp(prefix="naga-pe-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    port = model_server.server.port
    try:
        write_providers(home, f"http://0.0.0.0:{port}/v1")
        with core_in_thread(home, plugins=PluginsConfig(tuning=STEADY), agent=AGENT) as core:
            with core.client() as client:
                events = list(client.run_turn("s-egress", "hi", uuid.uuid4().hex, timeout=120))
                last = events[-1]
                assert last.WhichOneof("kind") == "error", last
                assert "0.0.0.0" in last.error.message or "refused" in last.error.message
                notes = [e.description for e in client.history(limit=200).entries]
                assert any(f"0.0.0.0:{port} refused" in n and "unspecified" in n for n in notes), (
                    notes
                )
                # The owner's loopback address is the provider's: reached.
                write_providers(home, model_server.server.openai_url)
                model_server.script(Reply.answer("through the tunnel"))
                events = list(client.run_turn("s-egress", "hi", uuid.uuid4().hex, timeout=120))
                assert events[-1].final.text == "through the tunnel"
                client.shutdown("tests done")
            assert not core.join().failed
    finally:
        shutil.rmtree(root, ignore_errors=True)
