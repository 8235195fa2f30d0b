"""The curator (issue 17): stale skills archived (never deleted), near-
duplicates merged into one new version with the old ones kept in the
tree, pinned skills exempt, every action an effect a rollback undoes."""

from __future__ import annotations

from pathlib import Path

from naga_core.skills import apply_curation, plan_curation
from tests.skills.helpers import open_store, skill_files

DAY = 86_400 * 1_000_000_000
PEER = "peer/webchat:alice"


def test_curate_archives_stale_merges_duplicates_spares_pinned_and_rolls_back(
    tmp_path: Path,
) -> None:
    with open_store(str(tmp_path)) as store:
        desc = "Sum one column of a CSV file. Use when a task asks for a CSV column total."
        body = "Read it with the csv module, skip the header, sum the column as floats.\n"
        store.create(PEER, skill_files("csv-sum", desc, body), author="agent", reason="t")
        store.create(
            PEER,
            skill_files(
                "csv-column-total",
                "Total of one CSV column. Use when a task asks for the sum of a CSV column.",
                body + "Watch for empty cells.\n",
            ),
            author="agent",
            reason="t",
        )
        other = "Find the commit that broke a test. Use when a regression appeared."
        store.create(
            "global",
            skill_files("git-bisect", other, "git bisect run\n"),
            author="owner",
            reason="t",
        )
        store.create(
            "global",
            skill_files("old-pinned", "An old trick. Use when nothing else works.", "x\n"),
            author="owner",
            reason="t",
        )
        store.pin("global", "old-pinned", True, author="owner", reason="keep")
        now = store.version(store.need("global", "git-bisect").commit).commit.time_ns + 40 * DAY
        uses = {
            f"{PEER}/csv-sum": (5, now - DAY),
            f"{PEER}/csv-column-total": (1, now - DAY),
        }
        before_seq = store.kernel.ledger.next_seq - 1
        before = store.refs()

        dry = plan_curation(store, uses, now_ns=now, stale_days=30, threshold=0.6)
        assert [(a.kind, a.scope, a.name, a.merged) for a in dry] == [
            ("archive", "global", "git-bisect", ()),
            ("merge", PEER, "csv-sum", (f"{PEER}/csv-column-total",)),
        ]
        assert store.refs() == before  # planning writes nothing

        apply_curation(store, dry)
        assert store.need("global", "git-bisect").archived
        assert not store.need("global", "old-pinned").archived  # pinned: exempt
        merged = store.need(PEER, "csv-sum")
        head = store.version(merged.commit)
        assert head.commit.author == "curator"
        assert head.commit.action == "merge"
        old_heads = {r.commit for r in before if r.scope == PEER}
        assert set(head.commit.parents) == old_heads  # both old versions in the tree
        assert store.need(PEER, "csv-column-total").archived
        assert "Watch for empty cells." in store.doc(head).body
        # Nothing deleted: every old version is still readable.
        for ref in before:
            assert store.version(ref.commit).digest == ref.commit

        store.kernel.rollback(before_seq)
        assert store.refs() == before
