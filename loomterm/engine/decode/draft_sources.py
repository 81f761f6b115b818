"""The draft sources of the last parent drafted from, kept between generations.

Building the tree index (``decode.draft_tree.TreeIndex``) and the alternatives table
(``decode.draft_table``) reads every token near the parent: on an 8,000-token path about
120 ms and 20 ms in Python, before the first token of every drafted generation.
Regenerating from the same point is what a loom user does most, and then only the
branch generated last is new. So the runner keeps the sources of the last parent, and
the next generation from it adds what appeared since (new branches, tokens appended
to a node) instead of reading everything again.

Kept sources are used only while every node they read is unchanged where they read it:
still in the tree, under the same parent, starting with the same token and no shorter
(a split, merge or move changes one of those; the sources are then built afresh). A
stale draft could only cost time -- drafts are verified -- but the check keeps the
drafts as good as a fresh build's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loomterm.engine.decode.draft_table import AlternativesTable, table_near
from loomterm.engine.decode.draft_tree import DraftConfig, TreeIndex, nearby_nodes
from loomterm.tree import Node


def _mark(node: Node) -> tuple[int, int | None, int | None]:
    """What must hold for a node's indexed tokens to still be where they were."""
    parent = node.parent.id if node.parent is not None else None
    return len(node.tokens), parent, node.tokens[0] if node.tokens else None


@dataclass
class DraftSources:
    """The tree index and alternatives table built for ``parent``."""

    parent: Node
    key: tuple
    index: TreeIndex
    table: AlternativesTable | None
    seen: dict[int, tuple[Node, tuple[int, int | None, int | None]]] = field(default_factory=dict)

    @classmethod
    def build(cls, parent: Node, config: DraftConfig, sampler: tuple, key: tuple):
        nodes = nearby_nodes(parent, None, config.pool_tokens)
        index = TreeIndex(config.max_ngram, config.per_key)
        for node in reversed(nodes):
            index.add(node)  # closest last: hits are tried newest first
        table = None
        if config.table_tokens:
            table = table_near(parent, sampler, config.table_tokens)
        sources = cls(parent, key, index, table)
        for node in nodes:
            sources.note(node)
        return sources

    def note(self, node: Node) -> None:
        """``node`` is read as it is now (after a generation wrote it)."""
        self.seen[node.id] = (node, _mark(node))

    def unchanged(self, nodes_by_id: dict[int, Node]) -> bool:
        for node_id, (node, (length, parent, first)) in self.seen.items():
            now = _mark(node)
            if nodes_by_id.get(node_id) is not node or now[1:] != (parent, first):
                return False
            if now[0] < length:
                return False
        return True

    def catch_up(self, nodes: list[Node]) -> None:
        """Add what ``nodes`` hold that was not read yet: new nodes, appended tokens."""
        for node in reversed(nodes):
            known = self.seen.get(node.id)
            start = known[1][0] if known is not None else 0
            if start >= len(node.tokens):
                continue
            self.index.add(node, start)
            if self.table is not None:
                self.table.add_node(node, start)
            self.note(node)


def draft_sources(
    kept: DraftSources | None,
    tree_nodes: dict[int, Node],
    parent: Node,
    config: DraftConfig,
    sampler: tuple,
) -> DraftSources:
    """The sources to draft a continuation of ``parent`` from: ``kept`` (those of the
    last generation), caught up, when they are still good, else new ones; the caller
    keeps what this returns. ``tree_nodes``: the tree's nodes by id; ``sampler``: the
    table's (temperature, top-k, top-p, min-p)."""
    key = (config.max_ngram, config.per_key, config.pool_tokens, config.table_tokens, sampler)
    if (
        kept is not None
        and kept.parent is parent
        and kept.key == key
        and kept.unchanged(tree_nodes)
    ):
        kept.catch_up(nearby_nodes(parent, None, config.pool_tokens))
        return kept
    return DraftSources.build(parent, config, sampler, key)
