"""WeChat messages through a real core (in a thread of this process), its
executors, the provider plugin on the fake model (answering at once, so a
reply's time is Naga's overhead) and the sandboxed WeChat plugin behind the
egress proxy, against the fake iLink server on loopback: prints one JSON
object.

* ``one_user``: one user, ``--messages`` messages one after another: from
  the message queued at the server to the first reply part sent, p50/p99;
* ``many_users``: ``--users`` users at once, each ``--per-user`` messages
  in a row: the same latency, and messages answered per second;
* ``lost`` and ``doubled``: messages without a reply, replies beyond one
  per message (and client_ids sent twice): both must be 0.

    python bench/wechat.py [--messages 40] [--users 20] [--per-user 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(__file__)]
sys.path.insert(0, REPO)

import trio  # noqa: E402

from naga_core.agent import AgentConfig  # noqa: E402
from naga_core.plugins import PluginsConfig  # noqa: E402
from naga_core.supervisor import WorkerTuning  # noqa: E402
from naga_core.wechat import ChannelConfig  # noqa: E402
from tests.agent.conftest import write_providers  # noqa: E402
from tests.daemon.conftest import core_in_thread  # noqa: E402
from tests.fakes.ilink import FakeILink, ilink_thread  # noqa: E402
from tests.fakes.model_server import FakeModelServer, Reply  # noqa: E402


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(latencies: list[float]) -> dict[str, float]:
    ms = [x * 1000 for x in latencies]
    return {
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(_pct(ms, 0.99), 1),
        "max_ms": round(max(ms), 1),
        "count": len(ms),
    }


async def _round_trips(server: FakeILink, bot_id: str, user: str, count: int) -> list[float]:
    """``count`` messages one after another; each message's time to its first part."""
    out: list[float] = []
    for i in range(count):
        before = len(server.texts_to(user))
        t0 = trio.current_time()
        server.user_says(bot_id, user, f"message {i} from {user}")
        while len(server.texts_to(user)) <= before:
            await server.sent_changed.wait()
        first = next(s for s in server.sent if s.user == user and s.at >= t0)
        out.append(first.at - t0)
    return out


async def _many(server: FakeILink, bot_id: str, users: int, each: int) -> tuple[list[float], float]:
    found: list[float] = []
    t0 = trio.current_time()

    async def one(n: int) -> None:
        found.extend(await _round_trips(server, bot_id, f"user{n}@im.wechat", each))

    async with trio.open_nursery() as nursery:
        for n in range(users):
            nursery.start_soon(one, n)
    return found, trio.current_time() - t0


@contextmanager
def _model_thread() -> Generator[tuple[FakeModelServer, trio.lowlevel.TrioToken]]:
    """The fake model on a trio loop of its own thread."""
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        async def serve() -> None:
            async with trio.open_nursery() as nursery:
                box["server"] = await nursery.start(FakeModelServer().serve)
                box["token"] = trio.lowlevel.current_trio_token()
                box["scope"] = nursery.cancel_scope
                started.set()

        trio.run(serve)

    thread = threading.Thread(target=run, name="fake-model", daemon=True)
    thread.start()
    started.wait(30)
    try:
        yield box["server"], box["token"]
    finally:
        trio.from_thread.run_sync(box["scope"].cancel, trio_token=box["token"])
        thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--per-user", type=int, default=5)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="naga-bw-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    expected = 3 + args.messages + args.users * args.per_user
    try:
        with ilink_thread(hold_s=5.0) as ilink, _model_thread() as (model, token):
            replies = [Reply.answer("ok, noted.") for _ in range(expected + 10)]
            trio.from_thread.run_sync(model.script, *replies, trio_token=token)
            write_providers(home, model.openai_url)
            agent = AgentConfig(executors=4, model_max_retries=1).with_budgets(100_000)
            channel = ChannelConfig(poll_timeout_ms=5000)
            with core_in_thread(
                home, plugins=PluginsConfig(tuning=WorkerTuning()), agent=agent, wechat=channel
            ) as core:
                with core.client() as client:
                    client.set_setting_text("egress.loopback_hosts", "127.0.0.1")
                    client.set_setting_text("wechat.api_base", ilink.server.base)
                    client.set_setting_text("wechat.cdn_base", ilink.server.cdn)
                    started = client.wechat_bind()
                    ilink.run(ilink.server.scan, started.login_id)
                    ilink.run(ilink.server.confirm, started.login_id, "owner@im.wechat")
                    answer = client.wechat_bind(started.login_id, wait=5)
                    while answer.status != "confirmed":
                        answer = client.wechat_bind(started.login_id, wait=5)
                    bot = answer.binding.bot_id
                    # Warm-up: executors, the provider, the plugin's connections.
                    ilink.wait(_round_trips, ilink.server, bot, "warm@im.wechat", 3, timeout=120)
                    one = ilink.wait(
                        _round_trips,
                        ilink.server,
                        bot,
                        "solo@im.wechat",
                        args.messages,
                        timeout=600,
                    )
                    many, wall = ilink.wait(
                        _many, ilink.server, bot, args.users, args.per_user, timeout=600
                    )
                    client.shutdown("bench done")
                core.join()
            sent = list(ilink.server.sent)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ids = [s.client_id for s in sent]
    result = {
        "one_user": _summary(one),
        "many_users": {
            **_summary(many),
            "users": args.users,
            "messages_per_s": round(len(many) / wall, 2),
        },
        "messages": expected,
        "lost": max(0, expected - len(sent)),
        "doubled": max(0, len(sent) - expected) + (len(ids) - len(set(ids))),
        "note": "the fake model answers at once: the latency is Naga's overhead",
    }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
