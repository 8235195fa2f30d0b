"""``naga.v1.MemoryService``: the owner's view of memory, decrypted, and
``forget`` (proto/naga/v1/memory.proto, docs/design/memory.md). Served to
the owner only (naga_core.daemon._policy)."""

from __future__ import annotations

import re

from naga.constants import SESSION_PATTERN
from naga.v1 import memory_pb2 as mmpb
from naga_core.agent import Agent, distill
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import AsyncUnary, Method, Unary
from naga_core.daemon._core import Core
from naga_core.daemon._errors import RequestRefused
from naga_core.memory import MemoryStore, check_subject

SERVICE = "naga.v1.MemoryService"
_ID = re.compile(r"mi-[0-9a-f]{16}")
_MAX_LIMIT = 1000
SESSION = re.compile(SESSION_PATTERN)


def _subject(subject: str, *, required: bool) -> None:
    if not subject and not required:
        return
    why = check_subject(subject)
    if why is not None:
        raise RequestRefused.invalid(why)


def check_list(req: mmpb.ListMemoryRequest) -> None:
    _subject(req.subject, required=False)


def check_show(req: mmpb.ShowMemoryRequest) -> None:
    if not _ID.fullmatch(req.id):
        raise RequestRefused.invalid(
            f"id: {req.id[:40]!r} is not a memory id (like mi-0123456789abcdef)"
        )


def check_search(req: mmpb.SearchMemoryRequest) -> None:
    _subject(req.subject, required=False)
    if not req.text.strip() or len(req.text) > 2000:
        raise RequestRefused.invalid("text: 1..2000 characters to search for")
    if not 0 <= req.limit <= _MAX_LIMIT:
        raise RequestRefused.invalid(f"limit: 0 (the default, 20) .. {_MAX_LIMIT}")


def check_forget(req: mmpb.ForgetMemoryRequest) -> None:
    _subject(req.subject, required=True)


def check_distill(req: mmpb.DistillMemoryRequest) -> None:
    if not SESSION.fullmatch(req.session):
        raise RequestRefused.invalid(f"session: {req.session[:80]!r} is not a session name")


class MemoryServicer:
    def __init__(self, core: Core, agent: Agent) -> None:
        self._core = core
        self._agent = agent
        self._store: MemoryStore = agent.memory.store

    def methods(self) -> list[Method]:
        return [
            Unary("List", mmpb.ListMemoryRequest, self.list, check_list),
            Unary("Show", mmpb.ShowMemoryRequest, self.show, check_show),
            Unary("Search", mmpb.SearchMemoryRequest, self.search, check_search),
            Unary("Forget", mmpb.ForgetMemoryRequest, self.forget, check_forget),
            AsyncUnary("Distill", mmpb.DistillMemoryRequest, self.distill, check_distill),
        ]

    def list(self, _p: Principal, req: mmpb.ListMemoryRequest) -> mmpb.ListMemoryResponse:
        return mmpb.ListMemoryResponse(items=[i.to_proto() for i in self._store.items(req.subject)])

    def show(self, _p: Principal, req: mmpb.ShowMemoryRequest) -> mmpb.ShowMemoryResponse:
        return mmpb.ShowMemoryResponse(item=self._store.get(req.id).to_proto())

    def search(self, _p: Principal, req: mmpb.SearchMemoryRequest) -> mmpb.SearchMemoryResponse:
        limit = req.limit or 20
        subjects = [req.subject] if req.subject else self._store.subjects()
        found = [i for s in subjects for i in self._store.search(s, req.text, limit)]
        return mmpb.SearchMemoryResponse(items=[i.to_proto() for i in found[:limit]])

    def forget(self, _p: Principal, req: mmpb.ForgetMemoryRequest) -> mmpb.ForgetMemoryResponse:
        store, core = self._store, self._core
        seq, count = core.write(lambda: store.forget(core.ledger, core.kernel, req.subject))
        self._agent.forgotten()
        return mmpb.ForgetMemoryResponse(seq=seq, items=count)

    async def distill(
        self, _p: Principal, req: mmpb.DistillMemoryRequest
    ) -> mmpb.DistillMemoryResponse:
        session = await self._agent.session(req.session)
        done = await distill(
            self._agent.core, self._agent.workers, self._store, req.session, list(session.entries)
        )
        return mmpb.DistillMemoryResponse(
            seq=done.seq,
            items=[i.to_proto() for i in done.items],
            refused=done.refused,
            outcome=done.outcome,
        )


__all__ = [
    "SERVICE",
    "MemoryServicer",
    "check_distill",
    "check_forget",
    "check_list",
    "check_search",
    "check_show",
]
