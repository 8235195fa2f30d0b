"""The client's calls of the MemoryService: the owner's view of memory,
decrypted, and forgetting a subject (docs/design/memory.md)."""

from __future__ import annotations

from naga.sdk._rpc import Rpc
from naga.v1 import memory_pb2 as mmpb

_MEMORY = "/naga.v1.MemoryService/"


class MemoryCalls(Rpc):
    def memory_items(
        self, subject: str = "", *, timeout: float | None = None
    ) -> list[mmpb.MemoryItem]:
        """Every live memory item (of ``subject``, or of all), oldest first."""
        req = mmpb.ListMemoryRequest(subject=subject)
        return list(self._read(_MEMORY + "List", req, mmpb.ListMemoryResponse, timeout).items)

    def memory_item(self, item_id: str, *, timeout: float | None = None) -> mmpb.MemoryItem:
        req = mmpb.ShowMemoryRequest(id=item_id)
        return self._read(_MEMORY + "Show", req, mmpb.ShowMemoryResponse, timeout).item

    def search_memory(
        self, text: str, subject: str = "", limit: int = 0, *, timeout: float | None = None
    ) -> list[mmpb.MemoryItem]:
        """The items most relevant to ``text`` (within each subject)."""
        req = mmpb.SearchMemoryRequest(text=text, subject=subject, limit=limit)
        return list(self._read(_MEMORY + "Search", req, mmpb.SearchMemoryResponse, timeout).items)

    def forget_subject(
        self, subject: str, *, timeout: float | None = None
    ) -> mmpb.ForgetMemoryResponse:
        """Destroy ``subject``'s key: everything sealed under it is gone for good."""
        req = mmpb.ForgetMemoryRequest(subject=subject)
        return self._write(_MEMORY + "Forget", req, mmpb.ForgetMemoryResponse, timeout)

    def distill_session(
        self, session: str, *, timeout: float | None = None
    ) -> mmpb.DistillMemoryResponse:
        """One distillation call over ``session``'s history: what it kept."""
        req = mmpb.DistillMemoryRequest(session=session)
        return self._write(_MEMORY + "Distill", req, mmpb.DistillMemoryResponse, timeout)


__all__ = ["MemoryCalls"]
