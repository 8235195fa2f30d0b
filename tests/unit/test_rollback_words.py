"""What `naga rollback` says an undo does, in words (the console's
changeWords says the same)."""

from __future__ import annotations

from naga_core.cli._kernel_cmds import _preview_lines, change_words  # pyright: ignore[reportPrivateUsage]


def test_lifting_a_token_revocation_is_said_as_such() -> None:
    # Was "remove token.revoked <id>": it read like a clean-up, not like
    # bringing a revoked token back to life (which needs the owner).
    assert change_words("token.revoked", "ab12", True, None) == "lift the revocation of token ab12"
    assert change_words("token.revoked", "ab12", None, True) == "revoke token ab12"


def test_a_refund_is_said_as_such() -> None:
    assert change_words("budget.spent", "cd34", 120, None) == "refund what token cd34 spent"
    assert change_words("budget.spent", "cd34", 120, 80) == "set what token cd34 spent back to 80"


def test_the_same_action_twice_is_one_line_and_kept_revocations_are_said() -> None:
    """Found by hand: two tool calls' restores printed the same line twice,
    and the revocations a restart made read as undone (ADR 0046)."""
    restore = "restore the files the undone tool calls changed in /w"
    data = {
        "effects_undone": 2,
        "to_seq": 1,
        "changes": [],
        "world_action_words": [restore, restore],
        "irreversible_seqs": [],
        "kept_seqs": [4],
        "entries": [{"seq": 4, "text": "revoke token aa: plugin fs: its worker ended"}],
    }
    assert _preview_lines(data) == [
        f"  {restore} (2 times)",
        "  keeps entry 4 as it is (a revocation is never lifted): "
        "revoke token aa: plugin fs: its worker ended",
    ]
    data["kept_seqs"] = [4, 5, 6, 7]
    assert _preview_lines(data)[-1] == (
        "  keeps 4 token revocations as they are (a revocation is never lifted): entries 4, 5, 6, 7"
    )
