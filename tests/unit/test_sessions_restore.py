"""A start-up image's session reload lists are taken only if they ascend
within the image (naga_core/agent/_sessions.py; the check runs in C since
ADR 0057): repeated or falling entries are refused, ascending ones kept."""

from __future__ import annotations

import pytest

from naga.v1 import snapshot_pb2 as snpb
from naga_core.agent._sessions import Sessions


@pytest.mark.parametrize("reload", [[8, 4], [4, 4], [4, 8, 12, 12], [4, 16, 8]])
def test_a_reload_list_that_does_not_ascend_is_refused(reload: list[int]) -> None:
    img = snpb.SessionImage(name="s-1", turns=1, last_seq=3, reload=reload)
    with pytest.raises(ValueError, match="not within the image"):
        Sessions().restore([img], through=10)


def test_an_ascending_reload_list_is_kept() -> None:
    img = snpb.SessionImage(name="s-1", turns=1, last_seq=3, reload=[4, 9, 12, 40])
    sessions = Sessions()
    sessions.restore([img], through=10)
    assert list(sessions.unloaded("s-1") or ()) == [4, 9, 12, 40]
