"""Skill reuse, measured in tokens and model calls: prints one JSON object.

A real core (in this process's thread) with its executor and provider
plugin, against a scripted fake model over real HTTP on loopback. The
fake behaves like a model that does not know a task family's trick: it
spends ``--k`` extra calls probing (``danger.echo``) before it finds it,
unless a skill stating the trick is in its prompt or was loaded with
``skill.view``. After a turn that succeeded with tools, the core's review
call asks it whether to save a skill; the fake proposes one stating the
trick it found (and cites the trace), and the core's sedimentation rules
judge it like any other proposal. Tokens are what the fake reports: the
request's bytes / 4 and the reply's.

For each of ``--families`` task families (made-up verbs, a deterministic
checker each), ``--repeats`` occurrences with fresh inputs, each in a new
session of one peer (skills land in the peer's scope). Reported: tokens
and model calls per solved task on the first and on later occurrences
(the review call included), success rates, skills created per family
(goal: 1, never more than 2), and retrieval latency (p50/p99) of the
prompt's skill offer with 1,000 skills in a store.

``--model local`` runs the same tasks against the embedded local model
(no scripted behaviour: what a real small model does) and prints the same
figures.

    python bench/skills.py [--families 6] [--repeats 4] [--k 5] [--model fake|local]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(__file__)]
sys.path.insert(0, REPO)

import trio  # noqa: E402

from naga.sdk import Client  # noqa: E402
from naga.sdk.errors import SdkError  # noqa: E402
from naga.v1 import core_pb2 as cpb  # noqa: E402
from naga.v1 import skills_pb2 as skpb  # noqa: E402
from naga_core.agent import AgentConfig  # noqa: E402
from naga_core.plugins import PluginsConfig  # noqa: E402
from naga_core.skills import TURN_KIND, Library, render  # noqa: E402
from tests.agent.conftest import PLUGINS, TUNING, write_providers  # noqa: E402
from tests.daemon.conftest import core_in_thread  # noqa: E402
from tests.fakes.model_server import FakeModelServer, Recorded, Reply  # noqa: E402
from tests.skills.helpers import open_store  # noqa: E402

PEER = "bench:owner"
#: family verb -> (the trick in words, the function it stands for)
FAMILIES: list[tuple[str, str, Callable[[int], int]]] = [
    ("zorbify", "multiply by 3, then add 7", lambda n: n * 3 + 7),
    ("quaxle", "square it, then subtract the number", lambda n: n * n - n),
    ("plinthify", "add 11, then multiply by 2", lambda n: (n + 11) * 2),
    ("morrowize", "multiply by 5, then subtract 4", lambda n: n * 5 - 4),
    ("vexelate", "double it twice, then add 1", lambda n: n * 4 + 1),
    ("drabblify", "add the number to 100, then halve it (integer)", lambda n: (n + 100) // 2),
    ("glimmerize", "multiply by 7, then subtract 3", lambda n: n * 7 - 3),
    ("snorkate", "add 13, then multiply by 3", lambda n: (n + 13) * 3),
]
_TASK = re.compile(r"Please (\w+) the number (\d+)\.")
_TRICK = re.compile(r"Trick for (\w+): ([^.\"\\]+)\.")


def task_text(verb: str, n: int) -> str:
    return f"Please {verb} the number {n}. Answer with the result only."


class FakeModel:
    """The scripted model (a responder of the fake server: one Reply per request)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.tricks = {verb: trick for verb, trick, _ in FAMILIES}
        self.fns = {verb: fn for verb, _, fn in FAMILIES}

    def __call__(self, request: Recorded) -> Reply:
        body = request.json()
        messages: list[dict[str, Any]] = body["messages"]
        prompt_tokens = len(request.body) // 4
        tool_names = [t["function"]["name"] for t in body.get("tools", [])]
        if "skill_review" in tool_names:
            return self._review(messages, prompt_tokens)
        text = " ".join(str(m.get("content") or "") for m in messages)
        task = _TASK.search(text)
        if task is None:
            return self._say("I cannot tell what the task is.", prompt_tokens)
        verb, n = task.group(1), int(task.group(2))
        known = {m.group(1) for m in _TRICK.finditer(text)}
        offered = f"- {verb}-" in str(messages[0].get("content", ""))
        viewed = any(
            m.get("role") == "tool" and "Trick for" in str(m.get("content")) for m in messages
        )
        probes = sum(
            1 for m in messages if m.get("role") == "tool" and "probe" in str(m.get("content"))
        )
        if verb in known and (viewed or verb in str(messages[0].get("content", ""))):
            return self._say(f"{self.fns[verb](n)}", prompt_tokens)
        if offered and not viewed and "skill__view" in tool_names:
            name = re.search(rf"- ({verb}-[a-z0-9-]+):", str(messages[0]["content"]))
            assert name is not None
            args = json.dumps({"name": name.group(1)})
            return self._call("skill__view", args, prompt_tokens)
        if probes < self.k:
            args = json.dumps({"text": f"probe {probes + 1} of {verb}"})
            return self._call("danger__echo", args, prompt_tokens)
        answer = self.fns[verb](n)
        return self._say(f"{answer} (Trick for {verb}: {self.tricks[verb]}.)", prompt_tokens)

    def _review(self, messages: list[dict[str, Any]], prompt_tokens: int) -> Reply:
        text = str(messages[-1].get("content", ""))
        found = _TRICK.search(text)
        if found is None or "probe" not in text:
            return self._call("skill_review", json.dumps({"action": "none"}), prompt_tokens)
        verb, trick = found.group(1), found.group(2)
        proposal = {
            "action": "create",
            "name": f"{verb}-numbers",
            "description": f"How to {verb} a number. Use when a task asks to {verb} a number.",
            "body": f"Trick for {verb}: {trick}.\n\nNo probing with `danger.echo` is needed.\n",
            "evidence": [f"Trick for {verb}: {trick}."],
            "reason": "found by probing; it will recur",
        }
        return self._call("skill_review", json.dumps(proposal), prompt_tokens)

    @staticmethod
    def _say(text: str, prompt_tokens: int) -> Reply:
        return Reply.answer(text, usage=(prompt_tokens, max(1, len(text) // 4)), pieces=1)

    @staticmethod
    def _call(name: str, args: str, prompt_tokens: int) -> Reply:
        call = (f"call-{uuid.uuid4().hex[:8]}", name, args)
        return Reply.answer(tool_calls=(call,), usage=(prompt_tokens, max(1, len(args) // 4)))


class Server:
    def __init__(self, responder: Callable[[Recorded], Reply | None]) -> None:
        self.server = FakeModelServer()
        self.server.responder = responder
        ready = threading.Event()
        self._box: dict[str, Any] = {}

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.server.serve)
                self._box["token"] = trio.lowlevel.current_trio_token()
                self._box["scope"] = nursery.cancel_scope
                ready.set()

        self._thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        self._thread.start()
        ready.wait(10)

    def stop(self) -> None:
        trio.from_thread.run_sync(self._box["scope"].cancel, trio_token=self._box["token"])
        self._thread.join(5)


def _usage(events: list[Any]) -> tuple[bool, str, int, int]:
    last = events[-1]
    if last.WhichOneof("kind") != "final":
        return False, f"error: {last.error.message}"[:200], 0, 0
    f = last.final
    return True, f.text, f.prompt_tokens + f.completion_tokens, f.model_calls


def _review_cost(client: Client, session: str) -> tuple[int, int]:
    """Tokens and calls of the session's review (turn.skill_review records)."""
    tokens = calls = 0
    start = max(0, client.head().size - 60)
    for rec in client.records(start, 200):
        if rec.kind == "turn.skill_review":
            from naga.v1 import agent_pb2 as apb

            body = apb.TurnRecord.FromString(rec.payload)
            if body.session == session:
                tokens += body.prompt_tokens + body.completion_tokens
                calls += 1
    return tokens, calls


def run_tasks(
    client: Client, families: int, repeats: int, seed: int, *, hint_first: bool
) -> dict[str, Any]:
    """``hint_first``: a real model cannot find a made-up trick by probing,
    so its first occurrence states the trick in the task; later ones do not
    (they are solved only if a skill saved it and the prompt offers it)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for rep in range(repeats):
        for verb, trick, fn in FAMILIES[:families]:
            n = rng.randrange(2, 500)
            session = f"b-{verb}-{rep}-{uuid.uuid4().hex[:6]}"
            text = task_text(verb, n)
            if hint_first and rep == 0:
                text += f" (Trick for {verb}: {trick}.)"
            # The skill.turn record follows the reply (the review runs after
            # it): wait for it, so the next task sees what this one saved. A
            # turn neither reviewed nor offered a skill leaves none: a real
            # model's may not, so its wait is bounded.
            sure = not hint_first
            sub = client.subscribe(
                client.head().size, kinds=[TURN_KIND], timeout=600 if sure else 20
            )
            events = list(client.run_turn(session, text, uuid.uuid4().hex, peer=PEER, timeout=600))
            ok, text, tokens, calls = _usage(events)
            with contextlib.suppress(SdkError):
                for event in sub:
                    if not event.HasField("record"):
                        continue
                    if skpb.SkillTurn.FromString(event.record.payload).session == session:
                        break
            sub.cancel()
            rtokens, rcalls = _review_cost(client, session)
            solved = ok and re.search(rf"(?<![\d-]){fn(n)}(?!\d)", text) is not None
            rows.append(
                {
                    "family": verb,
                    "rep": rep,
                    "solved": solved,
                    "tokens": tokens + rtokens,
                    "calls": calls + rcalls,
                    "answer": text[:120],
                }
            )
    return {"rows": rows}


def _figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def part(sel: list[dict[str, Any]]) -> dict[str, Any]:
        solved = [r for r in sel if r["solved"]]
        return {
            "tasks": len(sel),
            "success_rate": round(len(solved) / len(sel), 3) if sel else None,
            "tokens_per_solved": round(statistics.mean(r["tokens"] for r in solved), 1)
            if solved
            else None,
            "model_calls_per_solved": round(statistics.mean(r["calls"] for r in solved), 2)
            if solved
            else None,
        }

    first, later = part([r for r in rows if r["rep"] == 0]), part([r for r in rows if r["rep"] > 0])
    reduction = None
    if first["tokens_per_solved"] and later["tokens_per_solved"]:
        reduction = round(100 * (1 - later["tokens_per_solved"] / first["tokens_per_solved"]), 1)
    return {"first": first, "later": later, "token_reduction_pct": reduction}


def retrieval_latency(count: int, queries: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(3000)]
    with tempfile.TemporaryDirectory() as d, open_store(d) as store:
        with store.kernel.staged():
            for i in range(count):
                topic = rng.sample(words, 6)
                name = f"skill-{i}-{topic[0]}"
                desc = f"Handle {' '.join(topic[:3])}. Use when a task mentions {topic[1]}."
                body = " ".join(rng.sample(words, 60))
                store.create(
                    "global", {"SKILL.md": render(name, desc, body)}, author="owner", reason="bench"
                )
        store.kernel.ledger.commit()
        library = Library(store)
        t0 = time.perf_counter()
        library.offer("s1", PEER, "warm up", most=3, cap_tokens=300)
        build_ms = (time.perf_counter() - t0) * 1000
        samples: list[float] = []
        for _ in range(queries):
            q = "please " + " ".join(rng.sample(words, 8))
            t = time.perf_counter()
            library.offer("s1", PEER, q, most=3, cap_tokens=300)
            samples.append(time.perf_counter() - t)
    s = sorted(samples)
    return {
        "skills": count,
        "queries": queries,
        "index_build_ms": round(build_ms, 1),
        "p50_ms": round(statistics.median(s) * 1000, 3),
        "p99_ms": round(s[int(len(s) * 0.99) - 1] * 1000, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="skill reuse in tokens and model calls")
    ap.add_argument("--families", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--k", type=int, default=5, help="extra calls to find a trick without a skill")
    ap.add_argument("--model", choices=("fake", "local"), default="fake")
    ap.add_argument("--skills", type=int, default=1000, help="store size for the retrieval latency")
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    if not 5 <= args.families <= len(FAMILIES):
        raise SystemExit(f"--families must be 5..{len(FAMILIES)}")
    root = tempfile.mkdtemp(prefix="naga-bench-skills-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    server: Server | None = None
    model = FakeModel(args.k)
    if args.model == "fake":
        server = Server(model)
        write_providers(home, server.server.openai_url)
    agent = AgentConfig(executors=1, turn_timeout_s=600, max_tokens=256).with_budgets(1_000_000)
    plugins = PluginsConfig(roots=(str(PLUGINS),), tuning=TUNING)
    try:
        with core_in_thread(home, plugins=plugins, agent=agent) as core:
            with core.client() as c:
                c.enable_plugin("danger", wait=30)
                c.set_setting_text("skills.review", "on")
                c.set_trust(PEER, cpb.TRUST_LEVEL_OWNER, by_owner=True, reason="the bench's peer")
                result = run_tasks(
                    c, args.families, args.repeats, args.seed, hint_first=args.model == "local"
                )
                listed = c.call(
                    "/naga.v1.SkillService/List",
                    skpb.ListSkillsRequest(archived=True),
                    skpb.ListSkillsResponse,
                    read=True,
                )
                c.shutdown("bench done")
            core.join()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
    created: dict[str, int] = {verb: 0 for verb, _, _ in FAMILIES[: args.families]}
    for s in listed.skills:
        for verb in created:
            if s.name.startswith(verb):
                created[verb] += 1
    figures = _figures(result["rows"])
    out = {
        "bench": "skills",
        "model": args.model,
        "families": args.families,
        "repeats": args.repeats,
        "k_extra_calls": args.k if args.model == "fake" else None,
        **figures,
        "skills_created_per_family": created,
        "families_with_duplicates": sum(1 for n in created.values() if n > 1),
        "skills_in_store": len(listed.skills),
        "unsolved_examples": [
            {"family": r["family"], "rep": r["rep"], "answer": r["answer"]}
            for r in result["rows"]
            if not r["solved"]
        ][:4],
        "retrieval": retrieval_latency(args.skills, 200, args.seed),
    }
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
