"""What `naga rollback` says an undo does, in words (the console's
changeWords says the same)."""

from __future__ import annotations

from naga_core.cli._kernel_cmds import change_words


def test_lifting_a_token_revocation_is_said_as_such() -> None:
    # Was "remove token.revoked <id>": it read like a clean-up, not like
    # bringing a revoked token back to life (which needs the owner).
    assert change_words("token.revoked", "ab12", True, None) == "lift the revocation of token ab12"
    assert change_words("token.revoked", "ab12", None, True) == "revoke token ab12"


def test_a_refund_is_said_as_such() -> None:
    assert change_words("budget.spent", "cd34", 120, None) == "refund what token cd34 spent"
    assert change_words("budget.spent", "cd34", 120, 80) == "set what token cd34 spent back to 80"
