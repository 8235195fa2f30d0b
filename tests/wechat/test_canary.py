"""The canary test of memory (issue 18) for the WeChat channel: through the
real core, its executors and provider plugin, the sandboxed WeChat plugin
and the fake iLink server, the bound owner and another WeChat user each say
a planted canary, the model answers each with one, and the owner's turn
writes a memory holding one. Every file under ``$NAGA_HOME`` (the ledger,
blobs, projection, logs, run directory and the WeChat plugin's own work
directory), the owner's workspace aside, is searched for each canary in
plain, base64 and hex: none is found, while the core still shows each
sender their own words."""

from __future__ import annotations

import json
import uuid

from naga_core.wechat import session_of
from tests.canary_helpers import files_holding, forms
from tests.fakes.model_server import Reply
from tests.wechat.conftest import World, say, sent_texts

OWNER = "canary-owner@im.wechat"
STRANGER = "canary-stranger@im.wechat"


def _canary(who: str) -> str:
    return f"zq7{who}{uuid.uuid4().hex[:12]}"


def test_no_wechat_words_lie_in_plaintext_under_the_home(world: World) -> None:
    binding = world.active(OWNER)
    said = {who: _canary(who) for who in ("owner", "stranger", "memory", "reply")}
    memory = f"The owner's locker code is {said['memory']}."
    world.model.script(
        Reply.answer(tool_calls=(("m1", "memory__write", json.dumps({"text": memory})),)),
        Reply.answer(f"Noted ({said['reply']})."),
        Reply.answer("Hello, stranger."),
    )
    say(world, binding.bot_id, OWNER, f"Remember my locker code {said['owner']}")
    world.ilink.until(lambda s: s.texts_to(OWNER))
    assert sent_texts(world, OWNER)[-1] == f"Noted ({said['reply']})."
    say(world, binding.bot_id, STRANGER, f"hello, my name is {said['stranger']}")
    world.ilink.until(lambda s: s.texts_to(STRANGER))
    # The memory was written, not refused: the test is not of an empty store.
    owner_session = session_of(binding.bot_id, OWNER)
    texts = [e.text for e in world.client.session_history(owner_session)]
    assert any(said["owner"] in t for t in texts), texts
    assert any(said["reply"] in t for t in texts), texts
    stranger_texts = [
        e.text for e in world.client.session_history(session_of(binding.bot_id, STRANGER))
    ]
    assert any(said["stranger"] in t for t in stranger_texts), stranger_texts
    written = [
        r
        for r in world.model.server.requests
        if any(
            m.get("role") == "tool" and '"saved"' in str(m.get("content"))
            for m in r.json().get("messages", [])
        )
    ]
    assert written, "the memory.write call was never answered"
    hits = {who: files_holding(world.home, forms(c)) for who, c in said.items()}
    assert hits == {who: [] for who in said}, hits
