"""Random histories of workspace writes (fs.write, fs.edit, fs.delete, shell
commands creating, changing and deleting files, directories and symlinks)
over several turns through the real core and its sandboxed tools, then a
rollback to a random earlier point: the workspace's tree hash is the one
recorded at that point; rolling back the rollback restores the later one."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naga.sdk import Client
from naga_core.workspace import tree_hash
from tests.tools._turns import Call, last_seq, tool_turn
from tests.tools.conftest import ToolsCore

pytestmark = pytest.mark.slow

PATHS = ["a", "b", "a/x", "a/y", "b/z", "c", "a/x/q"]
TEXT = st.text(alphabet="xyz\n ", min_size=0, max_size=12)
SHELL = [
    "mkdir -p {p}",
    "echo {t} > {p}",
    "printf '%s' {t} >> {p}",
    "rm -rf {p}",
    "ln -sfn {q} {p}",
    "mv {p} {q}",
    "cp -r {p} {q}",
    "chmod +x {p}",
    "touch {p}",
    "mkdir -p {p} && echo {t} > {p}/n",
    "rm -f {p}; ln -s ../{q} {p}",
]


def _word(t: str) -> str:
    return "'" + t.replace("'", "") + "'"


@st.composite
def calls(draw: st.DrawFn) -> Call:
    kind = draw(st.sampled_from(["write", "edit", "delete", "shell", "shell"]))
    p = draw(st.sampled_from(PATHS))
    if kind == "write":
        return ("fs.write", {"path": p, "content": draw(TEXT)})
    if kind == "edit":
        return ("fs.edit", {"path": p, "old": draw(st.sampled_from("xyz")), "new": draw(TEXT)})
    if kind == "delete":
        return ("fs.delete", {"path": p})
    template = draw(st.sampled_from(SHELL))
    q = draw(st.sampled_from(PATHS))
    command = template.format(p=p, q=q, t=_word(draw(TEXT)))
    return ("shell.run", {"command": command, "timeout_s": 20})


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    turns=st.lists(st.lists(calls(), min_size=1, max_size=4), min_size=2, max_size=4),
    pick=st.integers(min_value=0),
)
def test_rollback_restores_the_tree_recorded_at_that_point(
    tools_core: ToolsCore, owner: Client, turns: list[list[Call]], pick: int
) -> None:
    root = tools_core.workspace
    points = [(last_seq(owner), tree_hash(root))]
    for i, turn_calls in enumerate(turns):
        tool_turn(tools_core, owner, f"prop-{i % 2}", turn_calls)
        points.append((last_seq(owner), tree_hash(root)))
    final = points[-1][1]
    to_seq, expected = points[pick % (len(points) - 1)]
    rolled = owner.rollback(to_seq, by_owner=True)
    assert tree_hash(root) == expected, (to_seq, turns)
    # Rolling back the rollback: keep the entry just before it.
    owner.rollback(rolled.seq - 1, by_owner=True)
    assert tree_hash(root) == final, (rolled.seq, turns)
