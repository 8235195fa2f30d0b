"""The parts of a replay with no core: inclusion paths from the tree's
levels, and the core's steering messages taken back off a request."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from naga.v1 import model_pb2 as mpb
from naga_core.ledger import inclusion_proof, root, verify_inclusion
from naga_core.replay._run import _strip_steers  # pyright: ignore[reportPrivateUsage]
from naga_core.replay._source import _path, _tree_levels  # pyright: ignore[reportPrivateUsage]


def _leaves(n: int) -> list[bytes]:
    return [hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(n)]


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))))
def test_paths_from_levels_are_the_rfc_9162_paths(case: tuple[int, int]) -> None:
    size, index = case
    leaves = _leaves(size)
    levels = _tree_levels(leaves)
    assert levels[-1] == [root(leaves)]
    path = _path(levels, index)
    assert path == inclusion_proof(leaves, index, size)
    verify_inclusion(leaves[index], index, size, path, root(leaves))


def _request(*texts: tuple[mpb.Role.ValueType, str]) -> mpb.ChatRequest:
    return mpb.ChatRequest(
        messages=[mpb.ChatMessage(role=r, content=t) for r, t in texts], max_tokens=7
    )


def test_steering_messages_come_off_the_end_only() -> None:
    base = ((mpb.ROLE_SYSTEM, "rules"), (mpb.ROLE_USER, "do it"))
    sent = _request(*base)
    steered = _request(*base, (mpb.ROLE_USER, "faster"), (mpb.ROLE_USER, "now"))
    assert _strip_steers(steered, ["faster", "now"]) == sent
    # Only the first steer had arrived when this call was made.
    assert _strip_steers(_request(*base, (mpb.ROLE_USER, "faster")), ["faster", "now"]) == sent
    # A final message that is not the steer is the executor's, and stays.
    other = _request(*base, (mpb.ROLE_ASSISTANT, "faster"))
    assert _strip_steers(other, ["faster"]) == other
    assert _strip_steers(sent, []) == sent
