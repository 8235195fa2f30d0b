"""Approvals: tool calls at or above ``tools.approve_from`` wait for the
owner, a timeout is a deny, each decision a ledger entry
(docs/design/tools.md)."""

from naga_core.approvals._approvals import ApprovalError, ApprovalNotFound, Approvals, Listener

__all__ = ["ApprovalError", "ApprovalNotFound", "Approvals", "Listener"]
