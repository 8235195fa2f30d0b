"""The client's calls of the ApprovalService: the tool calls waiting for the
owner, and the owner's answer (docs/design/tools.md)."""

from __future__ import annotations

from naga.sdk._rpc import Rpc
from naga.v1 import tools_pb2 as tlpb

_APPROVAL = "/naga.v1.ApprovalService/"


class ApprovalCalls(Rpc):
    def approvals(self, *, timeout: float | None = None) -> list[tlpb.PendingApproval]:
        """The tool calls waiting for the owner, oldest first."""
        req = tlpb.ListApprovalsRequest()
        answer = self._read(_APPROVAL + "List", req, tlpb.ListApprovalsResponse, timeout)
        return list(answer.pending)

    def decide_approval(
        self, approval_id: str, allow: bool, *, timeout: float | None = None
    ) -> int:
        """Allow (once) or deny the pending call; the seq of the decision's entry."""
        decision = tlpb.APPROVAL_DECISION_ALLOW if allow else tlpb.APPROVAL_DECISION_DENY
        req = tlpb.DecideApprovalRequest(id=approval_id, decision=decision)
        return self._write(_APPROVAL + "Decide", req, tlpb.DecideApprovalResponse, timeout).seq


__all__ = ["ApprovalCalls"]
