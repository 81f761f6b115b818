"""Trees known only by their text (another loom's file, or a session for another
model): :class:`TextTree`, and :func:`retokenize_tree` to give them a model's tokens.

A merged node's ``merged_origins`` counts tokens, which another tokenizer does not
share: its parts travel as text (``TextTree.parts``) and are counted again in the new
tokens; a merged node known only by its whole text loses the marks rather than keep
counts that would put them in the wrong places."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loomterm.export.parts import parts
from loomterm.store import SessionData
from loomterm.tree import MERGED_ORIGINS, Node, Origin, Tree


@dataclass
class TextTree:
    """A tree known only by its text (another loom's file): tokens come later, from a
    model, through :func:`retokenize_tree`."""

    root: int
    parents: dict[int, int | None]
    children: dict[int, list[int]]
    texts: dict[int, str]
    origins: dict[int, Origin]
    created: dict[int, float]
    meta: dict[int, dict[str, Any]]
    cursor: int
    settings: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    sampling: dict[int, Any] = field(default_factory=dict)
    seeds: dict[int, Any] = field(default_factory=dict)
    parts: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    """A merged node's parts as (text, origin), for its authors' marks (see above)."""
    notices: list[str] = field(default_factory=list)
    """What the user is told about the import: secrets dropped, parts skipped."""
    tool: str = ""
    """The tool that wrote the file (``KoboldAI``, ``SillyTavern``, ...; empty for looms)."""
    """What the user is told about the import: secrets dropped, parts skipped."""

    @property
    def created_at(self) -> float:
        return min(self.created.values(), default=time.time())


def text_tree_of(data: SessionData) -> TextTree:
    """A session's tree reduced to its text (to re-tokenize it for another model)."""
    nodes = list(data.tree.root.walk())
    return TextTree(
        root=data.tree.root.id,
        parents={n.id: n.parent.id if n.parent is not None else None for n in nodes},
        children={n.id: [c.id for c in n.children] for n in nodes},
        texts={n.id: data.text(n) for n in nodes},
        origins={n.id: Origin(n.origin) for n in nodes},
        created={n.id: n.created for n in nodes},
        meta={n.id: dict(n.meta) for n in nodes},
        cursor=data.cursor,
        settings=dict(data.settings),
        model=dict(data.model),
        name=data.name,
        sampling={n.id: n.sampling for n in nodes},
        seeds={n.id: n.seed for n in nodes},
        parts={
            n.id: [(part.text, part.origin.value) for part in parts(data, n)]
            for n in nodes
            if MERGED_ORIGINS in n.meta
        },
    )


def retokenize_tree(text: TextTree, encode: Callable[[str, bool], list[int]]) -> Tree:
    """Build a token tree from a text tree: each node's text is encoded on its own
    (``encode(text, at_start)``; ``at_start`` for the first text on a path, so the
    tokenizer may add its start token). Ids, order, origins, times and meta are kept;
    logprobs and alternatives are unknown."""
    nodes: dict[int, Node] = {}
    order = [(text.root, False)]
    while order:
        node_id, started = order.pop()
        parent_id = text.parents.get(node_id)
        meta = dict(text.meta.get(node_id, {}))
        meta.pop(MERGED_ORIGINS, None)  # counted in the old tokens: counted again below
        origin = text.origins.get(node_id, Origin.IMPORT)
        if parent_id is None:
            tokens = []
        elif node_id in text.parts:
            tokens, runs = _encode_parts(text.parts[node_id], encode, started)
            if any(who != Origin(origin).value for _, who in runs):
                meta[MERGED_ORIGINS] = runs
        else:
            tokens = encode(text.texts.get(node_id, ""), not started)
        node = Node(
            id=node_id,
            parent=nodes[parent_id] if parent_id is not None else None,
            tokens=tokens,
            logprobs=[None] * len(tokens),
            top=[None] * len(tokens),
            origin=origin,
            sampling=text.sampling.get(node_id),
            seed=text.seeds.get(node_id),
            created=text.created.get(node_id, time.time()),
            meta=meta,
        )
        if node.parent is not None:
            node.parent.children.append(node)
        nodes[node_id] = node
        for child in reversed(text.children.get(node_id, [])):
            order.append((child, started or bool(tokens)))
    return Tree.from_nodes(nodes[text.root], nodes)


def _encode_parts(
    pieces: list[tuple[str, str]], encode: Callable[[str, bool], list[int]], started: bool
) -> tuple[list[int], list[list[Any]]]:
    """A merged node's tokens, each part encoded on its own (as it was a node of its own
    before the merge), and its ``merged_origins`` runs in those tokens."""
    tokens: list[int] = []
    runs: list[list[Any]] = []
    for part_text, origin in pieces:
        got = encode(part_text, not started and not tokens) if part_text else []
        tokens += got
        if runs and runs[-1][1] == origin:
            runs[-1][0] += len(got)
        elif got:
            runs.append([len(got), origin])
    return tokens, runs
