"""Draft sources kept between generations from the same parent: caught up, not rebuilt,
and rebuilt when the tree changed under them."""

from __future__ import annotations

import pytest

from loomterm.engine.decode.draft_sources import DraftSources
from loomterm.engine.decode.draft_tree import DraftConfig

PROMPT = "Once upon a time, in a land far away, there lived a weaver who wove stories."


def _regenerate(loom, node, seed, mode="tree"):
    loom.update_settings(drafting=mode)
    (kid,) = loom.generate(node, 16, temperature=0.8, seed=seed)
    return kid


def test_regenerating_catches_the_kept_sources_up_to_a_fresh_build(loom):
    node = loom.append(loom.root, PROMPT)
    _regenerate(loom, node, 0)
    kept = loom.runner.draft_sources
    assert kept.parent is node
    second = _regenerate(loom, node, 1)
    assert loom.runner.draft_sources is kept  # reused, not rebuilt
    assert second.id in kept.seen
    fresh = DraftSources.build(node, DraftConfig(), kept.key[-1], kept.key)
    # Same tables (up to float sums in another order), same n-grams indexed.
    assert set(kept.table.after_two) == set(fresh.table.after_two)
    for key, weights in fresh.table.after_two.items():
        assert kept.table.after_two[key] == pytest.approx(weights)
    assert set(kept.index.table) == set(fresh.index.table)
    for key, hits in fresh.index.table.items():
        assert {(n.id, o) for n, o in hits} <= {(n.id, o) for n, o in kept.index.table[key]} or (
            len(kept.index.table[key]) == kept.index.table[key].maxlen
        )


def test_a_changed_tree_rebuilds_the_sources(loom):
    node = loom.append(loom.root, PROMPT)
    first = _regenerate(loom, node, 0)
    kept = loom.runner.draft_sources
    loom.truncate(first, node.end + 4)  # the branch is split: its tokens moved
    _regenerate(loom, node, 1)
    assert loom.runner.draft_sources is not kept


def test_another_parent_or_temperature_builds_new_sources(loom):
    node = loom.append(loom.root, PROMPT)
    _regenerate(loom, node, 0)
    kept = loom.runner.draft_sources
    loom.update_settings(drafting="tree")
    loom.generate(node, 8, temperature=0.5, seed=0)
    assert loom.runner.draft_sources is not kept  # the table is tempered otherwise
    other = loom.append(loom.root, "A different start.")
    again = loom.runner.draft_sources
    _regenerate(loom, other, 0)
    assert loom.runner.draft_sources is not again and loom.runner.draft_sources.parent is other


def test_kept_sources_keep_drafting_lossless(loom):
    node = loom.append(loom.root, PROMPT)
    for seed in range(3):
        plain = _regenerate(loom, node, seed, mode="off")
        drafted = _regenerate(loom, node, seed, mode="tree")
        assert drafted.tokens == plain.tokens
