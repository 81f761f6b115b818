"""The loom's tree: nodes that each hold a run of tokens, and the paths through them.

Pure Python, standard library only. The engine hangs KV tensors on nodes through the
opaque ``Node.kv`` slot; nothing here knows what they are.

A *path* is the chain of nodes from the root to a node; its tokens are the
concatenation of every segment on it. Positions are implicit: a node's first token sits
at ``node.start``, the number of tokens above it. Nodes are never destroyed: edits make
new branches, and truncating inside a node splits it in two (see ``Tree.split``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Origin(str, Enum):
    """Who wrote a node's tokens."""

    ROOT = "root"
    USER = "user"  # typed or pasted by the user
    MODEL = "model"  # sampled by the model
    EDIT = "edit"  # made by an edit: inserted text, or a copied suffix after a splice
    IMPORT = "import"  # brought in from another loom's file


# Origins of text the writer put in (typed, pasted, inserted by an edit): a childless
# node of theirs is retyped in place (``Loom.retype``) rather than branched.
WRITER = frozenset({Origin.USER, Origin.EDIT})

# One alternative token: (token_id, log-probability under the model).
Alternative = tuple[int, float]


@dataclass(eq=False)
class Node:
    """One segment of the tree.

    Attributes:
        id: Stable integer id, unique within a tree.
        parent: The node above, or None for the root.
        children: Branches below, oldest first.
        tokens: This segment's token ids.
        logprobs: Per token, the model's log-probability of the chosen token, or None
            where it was never measured (typed text).
        top: Per token, the model's top alternatives at that position as
            ``(token_id, logprob)`` pairs (best first), or None.
        origin: Who wrote the tokens.
        approx: True when this node's KV was re-rotated from another position (fast
            splice, context shift) or computed on top of such KV, so its logits are an
            approximation until refreshed.
        sampling: The sampling settings that produced the tokens, for generated nodes.
        seed: The seed that produced the tokens, if one was given.
        created: Creation time (seconds since the epoch).
        meta: Free-form extra data (chat role, bookmarks, hidden flag...).
        kv: The engine's cached keys and values for a prefix of ``tokens`` (or None).
    """

    id: int
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    top: list[list[Alternative] | None] = field(default_factory=list)
    origin: Origin = Origin.USER
    approx: bool = False
    sampling: dict[str, Any] | None = None
    seed: int | None = None
    created: float = field(default_factory=time.time)
    meta: dict[str, Any] = field(default_factory=dict)
    kv: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Node(id={self.id}, start={self.start}, len={len(self.tokens)}, origin={self.origin.value})"

    # -- geometry -------------------------------------------------------------------
    @property
    def start(self) -> int:
        """Path position of this node's first token (tokens above it)."""
        total = 0
        node = self.parent
        while node is not None:
            total += len(node.tokens)
            node = node.parent
        return total

    @property
    def end(self) -> int:
        """Path length up to and including this node."""
        return self.start + len(self.tokens)

    @property
    def depth(self) -> int:
        """Number of nodes above this one."""
        depth, node = 0, self.parent
        while node is not None:
            depth, node = depth + 1, node.parent
        return depth

    def path(self) -> list[Node]:
        """Nodes from the root down to and including this one."""
        nodes: list[Node] = []
        node: Node | None = self
        while node is not None:
            nodes.append(node)
            node = node.parent
        nodes.reverse()
        return nodes

    def path_tokens(self) -> list[int]:
        """All token ids on the path from the root to this node."""
        out: list[int] = []
        for node in self.path():
            out.extend(node.tokens)
        return out

    def siblings(self) -> list[Node]:
        """This node and its siblings, in creation order (just [self] for the root)."""
        return list(self.parent.children) if self.parent is not None else [self]

    def is_ancestor_of(self, other: Node) -> bool:
        """True when this node lies on ``other``'s path (a node is its own ancestor)."""
        node: Node | None = other
        while node is not None:
            if node is self:
                return True
            node = node.parent
        return False

    def walk(self) -> Iterator[Node]:
        """This node and every descendant, depth first, in creation order."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def leaf(self) -> Node:
        """Follow the newest child down to a leaf."""
        node = self
        while node.children:
            node = node.children[-1]
        return node


def merge_problem(node: Node) -> str | None:
    """Why ``node`` cannot merge into its parent (:meth:`Tree.merge`), or None if it can."""
    head = node.parent
    if head is None or head.parent is None:
        return "this node has no parent to merge into (the root is above it)"
    if len(head.children) != 1:
        return (
            f"the parent has {len(head.children)} branches: only an only child merges "
            "into its parent (move the others first)"
        )
    return None


class Tree:
    """Owns the nodes and hands out ids. Every structural change goes through here."""

    def __init__(self) -> None:
        self._next_id = 0
        self.nodes: dict[int, Node] = {}
        self.foreseen: dict[int, Node] = {}
        """Nodes written ahead of a request and held out of sight (``engine.loom.foresight``):
        each has an id and a parent, but no parent lists it and ``nodes`` leaves it out,
        so nothing that reads the tree sees it until :meth:`adopt`."""
        self.root = self._make(parent=None, origin=Origin.ROOT)

    @classmethod
    def from_nodes(cls, root: Node, nodes: dict[int, Node]) -> Tree:
        """A tree around nodes that are already linked (parents and children set), such
        as nodes read back from a session file. New ids continue after the largest."""
        tree = cls()
        tree.nodes = dict(nodes)
        tree.root = root
        tree.continue_ids()
        return tree

    def continue_ids(self) -> None:
        """Make new ids continue after the largest id in the tree (after nodes were
        added from outside, as a journal replay does)."""
        self._next_id = max(self.nodes) + 1

    def _make(self, parent: Node | None, origin: Origin, **fields: Any) -> Node:
        node = Node(id=self._next_id, parent=parent, origin=origin, **fields)
        self._next_id += 1
        self.nodes[node.id] = node
        if parent is not None:
            parent.children.append(node)
        return node

    def add(
        self,
        parent: Node,
        tokens: list[int],
        origin: Origin,
        logprobs: list[float | None] | None = None,
        top: list[list[Alternative] | None] | None = None,
        **fields: Any,
    ) -> Node:
        """Create a child of ``parent`` holding ``tokens``."""
        n = len(tokens)
        return self._make(
            parent,
            origin,
            tokens=list(tokens),
            logprobs=list(logprobs) if logprobs is not None else [None] * n,
            top=list(top) if top is not None else [None] * n,
            **fields,
        )

    # -- foreseen: nodes out of sight until adopted ---------------------------------------
    def add_foreseen(self, parent: Node, tokens: list[int], origin: Origin, **fields: Any) -> Node:
        """Like :meth:`add`, a child of ``parent``, but held in ``foreseen``: its parent does
        not list it and ``nodes`` leaves it out until :meth:`adopt`."""
        node = self.add(parent, tokens, origin, **fields)
        parent.children.pop()  # just appended by ``add``
        del self.nodes[node.id]
        self.foreseen[node.id] = node
        return node

    def is_foreseen(self, node: Node) -> bool:
        """True for a node held out of sight (made by :meth:`add_foreseen`, not adopted)."""
        return self.foreseen.get(node.id) is node

    def adopt(self, node: Node) -> None:
        """Make a foreseen node a node of the tree: its parent's newest child, with its id."""
        if self.foreseen.pop(node.id, None) is not node:
            raise ValueError(f"node {node.id} is not foreseen in this tree")
        assert node.parent is not None
        self.nodes[node.id] = node
        node.parent.children.append(node)

    def discard(self, node: Node) -> None:
        """Forget a foreseen node, and its KV with it."""
        if self.foreseen.get(node.id) is node:
            del self.foreseen[node.id]
            node.kv = None

    def split(self, node: Node, offset: int) -> Node:
        """Split ``node`` so that its first ``offset`` tokens become a new parent node.

        The new head takes ``node``'s place under its parent; ``node`` keeps its id and
        its children and becomes the head's only child, holding the rest. References to
        ``node`` therefore still name the same path. Returns the head. The ``split_kv``
        hook (set by the engine) divides the KV between the halves.
        """
        if not 0 < offset < len(node.tokens):
            raise ValueError(f"split offset {offset} outside node of {len(node.tokens)} tokens")
        parent = node.parent
        assert parent is not None, "the root holds no tokens"
        head = Node(
            id=self._next_id,
            parent=parent,
            tokens=node.tokens[:offset],
            logprobs=node.logprobs[:offset],
            top=node.top[:offset],
            origin=node.origin,
            approx=node.approx,
            sampling=node.sampling,
            seed=node.seed,
            created=node.created,
            meta={k: v for k, v in node.meta.items() if k in INHERITED_META},
        )
        self._next_id += 1
        self.nodes[head.id] = head
        if MERGED_ORIGINS in node.meta:  # each half keeps the authors of its own tokens
            _split_origins(node, head, offset)
        parent.children[parent.children.index(node)] = head
        head.children = [node]
        node.parent = head
        del node.tokens[:offset]
        del node.logprobs[:offset]
        del node.top[:offset]
        if self.split_kv is not None:
            head.kv, node.kv = self.split_kv(node.kv, offset)
        else:
            head.kv = node.kv = None
        return head

    # Set by the engine: (kv, offset) -> (head_kv, tail_kv).
    split_kv: Any = None

    # -- tidying the tree (move, merge, and the undo of a merge) ------------------------
    def move(self, node: Node, new_parent: Node, index: int | None = None) -> tuple[Node, int]:
        """Make ``node`` (with its subtree) a child of ``new_parent``, at ``index`` among
        its children (default: last). Returns the old ``(parent, index)``, which a
        second ``move`` takes to put it back. Tokens, records and ids are unchanged;
        the KV of the moved subtree is the caller's business (its positions and
        context may have changed)."""
        parent = node.parent
        if parent is None:
            raise ValueError("the root cannot move")
        if node.is_ancestor_of(new_parent):
            raise ValueError("a node cannot move below itself")
        old_index = parent.children.index(node)
        parent.children.remove(node)
        kids = new_parent.children
        kids.insert(len(kids) if index is None else max(0, min(index, len(kids))), node)
        node.parent = new_parent
        return parent, old_index

    def merge(self, node: Node, join_kv: Any = None) -> Merged:
        """Fold ``node``'s parent into ``node``: the parent's tokens (and records) go
        in front of ``node``'s, and ``node`` takes the parent's place among its
        siblings. The inverse of :meth:`split`: ``node`` keeps its id and children, so
        references to it still name the same path; the parent leaves the tree. Only an
        only child merges (a sibling would otherwise find ``node``'s text in its path).

        Returns a :class:`Merged` record that :meth:`unmerge` takes to undo it.
        ``join_kv(head_kv, tail_kv, head_tokens)`` (else the ``merge_kv`` hook) joins
        the KV of the halves; without either the merged node has none."""
        problem = merge_problem(node)
        if problem is not None:
            raise ValueError(problem)
        head = node.parent
        assert head is not None and head.parent is not None  # merge_problem said so
        grand = head.parent
        count = len(head.tokens)
        record = Merged(
            head=head,
            node=node,
            approx=node.approx,
            added_meta=tuple(
                key for key in head.meta if key not in node.meta and key != MERGED_ORIGINS
            ),
            origins=node.meta.get(MERGED_ORIGINS),
        )
        runs = origin_runs(head) + origin_runs(node)
        node.tokens[:0] = head.tokens
        node.logprobs[:0] = head.logprobs
        node.top[:0] = head.top
        node.approx = node.approx or head.approx
        for key in record.added_meta:
            node.meta[key] = head.meta[key]
        if any(origin != Origin(node.origin).value for _, origin in runs):
            # Who wrote which part, so an export can still tell.
            node.meta[MERGED_ORIGINS] = _packed(runs)
        else:
            node.meta.pop(MERGED_ORIGINS, None)
        join = join_kv or self.merge_kv
        node.kv = join(head.kv, node.kv, count) if join is not None else None
        head.kv = None
        grand.children[grand.children.index(head)] = node
        node.parent = grand
        head.children = []
        del self.nodes[head.id]
        return record

    def unmerge(self, record: Merged) -> Node:
        """Undo :meth:`merge`: the same head node (same id) comes back above ``node``
        with its tokens. Returns the head."""
        head, node = record.head, record.node
        count = len(head.tokens)
        if self.nodes.get(node.id) is not node or node.tokens[:count] != head.tokens:
            raise ValueError("the merged node changed since: the merge cannot be undone")
        if head.id in self.nodes:
            raise ValueError(f"node {head.id} is in the tree already")
        parent = node.parent
        assert parent is not None
        parent.children[parent.children.index(node)] = head
        head.parent = parent
        head.children = [node]
        node.parent = head
        del node.tokens[:count]
        del node.logprobs[:count]
        del node.top[:count]
        node.approx = record.approx
        for key in record.added_meta:
            node.meta.pop(key, None)
        if record.origins is None:
            node.meta.pop(MERGED_ORIGINS, None)
        else:
            node.meta[MERGED_ORIGINS] = record.origins
        if self.split_kv is not None:
            head.kv, node.kv = self.split_kv(node.kv, count)
        else:
            head.kv = node.kv = None
        self.nodes[head.id] = head
        return head

    # Set by the engine: (head_kv, tail_kv, head_tokens) -> the KV of the merged node.
    merge_kv: Any = None

    def locate(self, node: Node, position: int) -> tuple[Node, int]:
        """The node on ``node``'s path that holds path position ``position``, and the
        offset inside it. ``position`` may equal the path length (the end)."""
        path = node.path()
        start = 0
        for item in path:
            if position < start + len(item.tokens):
                return item, position - start
            start += len(item.tokens)
        return path[-1], len(path[-1].tokens)


@dataclass(frozen=True)
class Merged:
    """What :meth:`Tree.merge` did, for :meth:`Tree.unmerge`.

    Attributes:
        head: The parent that was folded in (out of the tree, its tokens kept).
        node: The node that took in the head's tokens.
        approx: ``node``'s approximate flag before the merge.
        added_meta: Meta keys ``node`` took from the head.
        origins: ``node``'s ``merged_origins`` meta before the merge (None: none).
    """

    head: Node
    node: Node
    approx: bool
    added_meta: tuple[str, ...]
    origins: Any = None


# Meta key of a merged node whose parts had different authors: ``[[count, origin],
# ...]`` runs from its first token on (a node's own origin applies to the rest).
MERGED_ORIGINS = "merged_origins"


def origin_runs(node: Node, packed: Any = ...) -> list[tuple[int, str]]:
    """Who wrote ``node``'s tokens, as ``(count, origin)`` runs covering all of them."""
    packed = node.meta.get(MERGED_ORIGINS) if packed is ... else packed
    runs: list[tuple[int, str]] = []
    covered = 0
    for count, origin in packed or ():
        count = max(0, min(int(count), len(node.tokens) - covered))
        if count:
            runs.append((count, str(origin)))
            covered += count
    if covered < len(node.tokens):
        runs.append((len(node.tokens) - covered, Origin(node.origin).value))
    return runs


def _split_origins(node: Node, head: Node, offset: int) -> None:
    """``merged_origins`` of ``node`` divided between ``head`` (its first ``offset``
    tokens, still on ``node`` when this runs) and ``node``."""
    front: list[tuple[int, str]] = []
    back: list[tuple[int, str]] = []
    done = 0
    for count, origin in origin_runs(node):
        take = max(0, min(count, offset - done))
        if take:
            front.append((take, origin))
        if count > take:
            back.append((count - take, origin))
        done += count
    for part, runs in ((head, front), (node, back)):
        if any(origin != Origin(part.origin).value for _, origin in runs):
            part.meta[MERGED_ORIGINS] = _packed(runs)
        else:
            part.meta.pop(MERGED_ORIGINS, None)


def _packed(runs: list[tuple[int, str]]) -> list[list[Any]]:
    """``runs`` with neighbours by the same author joined, as JSON-ready lists."""
    out: list[list[Any]] = []
    for count, origin in runs:
        if out and out[-1][1] == origin:
            out[-1][0] += count
        else:
            out.append([count, origin])
    return out


# Meta keys that a head keeps when a node is split (a chat role applies to both halves).
INHERITED_META = frozenset({"role", "model"})


# -- ratings ----------------------------------------------------------------------------
# A node's rating is ``node.meta["rating"]``: GOOD (1) or BAD (-1); absent when unrated.
# It is set through ``Loom.set_meta(node, rating=...)`` (None clears it), so the session
# saves it. The editor rates the first node of a branch (just below its branch point).
RATING = "rating"
GOOD = 1
BAD = -1


def rating_of(node: Node) -> int | None:
    """``node``'s rating: 1 (good), -1 (bad) or None (unrated, or a value that is
    neither)."""
    value = node.meta.get(RATING)
    return value if value in (GOOD, BAD) and not isinstance(value, bool) else None
