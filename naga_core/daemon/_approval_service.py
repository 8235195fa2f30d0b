"""``naga.v1.ApprovalService``: the tool calls waiting for the owner, and the
owner's decision (proto/naga/v1/tools.proto, docs/design/tools.md)."""

from __future__ import annotations

import re

from naga.v1 import tools_pb2 as tlpb
from naga_core.approvals import Approvals
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import Method, Unary
from naga_core.daemon._errors import RequestRefused

SERVICE = "naga.v1.ApprovalService"
_ID = re.compile(r"ap-[0-9a-f]{1,32}")


def check_decide(req: tlpb.DecideApprovalRequest) -> None:
    if not _ID.fullmatch(req.id):
        raise RequestRefused.invalid(f"id: {req.id!r} is not an approval id (like ap-1f2e3d4c5b6a)")
    if req.decision not in (tlpb.APPROVAL_DECISION_ALLOW, tlpb.APPROVAL_DECISION_DENY):
        raise RequestRefused.invalid("decision: must be ALLOW or DENY")


class ApprovalServicer:
    def __init__(self, approvals: Approvals) -> None:
        self._approvals = approvals

    def methods(self) -> list[Method]:
        return [
            Unary("List", tlpb.ListApprovalsRequest, self.list),
            Unary("Decide", tlpb.DecideApprovalRequest, self.decide, check_decide),
        ]

    def list(self, _p: Principal, _req: tlpb.ListApprovalsRequest) -> tlpb.ListApprovalsResponse:
        return tlpb.ListApprovalsResponse(pending=self._approvals.pending())

    def decide(self, _p: Principal, req: tlpb.DecideApprovalRequest) -> tlpb.DecideApprovalResponse:
        allow = req.decision == tlpb.APPROVAL_DECISION_ALLOW
        return tlpb.DecideApprovalResponse(seq=self._approvals.decide(req.id, allow))


__all__ = ["SERVICE", "ApprovalServicer", "check_decide"]
