"""The tree on its own (no model): geometry of paths, ids, splitting and locating."""

from __future__ import annotations

import pytest

from loomterm.tree import INHERITED_META, Node, Origin, Tree


def chain(tree: Tree, *segments: list[int]) -> list[Node]:
    """Nodes holding ``segments``, each the child of the one before (under the root)."""
    nodes, parent = [], tree.root
    for tokens in segments:
        parent = tree.add(parent, tokens, Origin.USER)
        nodes.append(parent)
    return nodes


def test_a_new_tree_has_only_its_root():
    tree = Tree()
    root = tree.root
    assert root.id == 0 and tree.nodes == {0: root}
    assert root.parent is None and root.children == [] and root.tokens == []
    assert root.origin is Origin.ROOT
    assert (root.start, root.end, root.depth) == (0, 0, 0)
    assert root.path() == [root] and root.path_tokens() == []
    assert root.siblings() == [root] and root.leaf() is root


def test_geometry_along_a_path():
    tree = Tree()
    a, b, c = chain(tree, [1, 2, 3], [4], [5, 6])
    assert [n.id for n in (a, b, c)] == [1, 2, 3]
    assert [(n.start, n.end, n.depth) for n in (a, b, c)] == [(0, 3, 1), (3, 4, 2), (4, 6, 3)]
    assert c.path() == [tree.root, a, b, c]
    assert c.path_tokens() == [1, 2, 3, 4, 5, 6]
    assert b.path_tokens() == [1, 2, 3, 4]
    empty = tree.add(c, [], Origin.MODEL)  # a generation's child before its first token
    assert (empty.start, empty.end) == (6, 6)


def test_add_copies_its_lists_and_fills_missing_records():
    tree = Tree()
    tokens = [7, 8]
    node = tree.add(tree.root, tokens, Origin.MODEL, sampling={"temperature": 0.5}, seed=3)
    tokens.append(9)
    assert node.tokens == [7, 8]  # not the caller's list
    assert node.logprobs == [None, None] and node.top == [None, None]
    assert node.origin is Origin.MODEL and node.sampling == {"temperature": 0.5}
    assert node.seed == 3 and node.meta == {} and node.kv is None and not node.approx
    logprobs, top = [-0.5, -1.0], [[(1, -0.5)], None]
    other = tree.add(tree.root, [1, 2], Origin.EDIT, logprobs=logprobs, top=top, approx=True)
    logprobs.append(0.0)
    top.append(None)
    assert other.logprobs == [-0.5, -1.0] and other.top == [[(1, -0.5)], None]
    assert other.approx
    assert tree.root.children == [node, other] and tree.nodes[other.id] is other


def test_nodes_compare_by_identity():
    assert Node(id=1) != Node(id=1)
    node = Node(id=1)
    assert node == node and len({Node(id=1), Node(id=1)}) == 2


def test_repr_names_the_geometry():
    tree = Tree()
    (a,) = chain(tree, [1, 2])
    b = tree.add(a, [3, 4, 5], Origin.MODEL)
    assert repr(b) == "Node(id=2, start=2, len=3, origin=model)"
    assert repr(tree.root) == "Node(id=0, start=0, len=0, origin=root)"


def test_siblings_ancestry_walk_and_leaf():
    tree = Tree()
    a = tree.add(tree.root, [1], Origin.USER)
    b = tree.add(a, [2], Origin.MODEL)
    c = tree.add(a, [3], Origin.MODEL)
    d = tree.add(b, [4], Origin.MODEL)
    e = tree.add(tree.root, [5], Origin.USER)
    assert b.siblings() == [b, c] and a.siblings() == [a, e]
    siblings = b.siblings()
    siblings.pop()
    assert a.children == [b, c]  # a copy
    assert a.is_ancestor_of(d) and a.is_ancestor_of(a) and tree.root.is_ancestor_of(e)
    assert not d.is_ancestor_of(a) and not c.is_ancestor_of(d) and not e.is_ancestor_of(b)
    assert list(tree.root.walk()) == [tree.root, a, b, d, c, e]  # depth first, oldest first
    assert list(b.walk()) == [b, d]
    assert tree.root.leaf() is e and a.leaf() is c and b.leaf() is d


def test_from_nodes_continues_the_ids():
    tree = Tree()
    chain(tree, [1], [2], [3])
    nodes = dict(tree.nodes)
    again = Tree.from_nodes(tree.root, nodes)
    assert again.root is tree.root and again.nodes == nodes
    nodes.pop(3)
    assert 3 in again.nodes  # its own dict
    assert again.add(again.root, [9], Origin.IMPORT).id == 4
    sparse = {0: Node(id=0, origin=Origin.ROOT), 7: Node(id=7)}
    assert Tree.from_nodes(sparse[0], sparse).add(sparse[0], [], Origin.USER).id == 8


# -- split ---------------------------------------------------------------------------------
def test_split_makes_a_head_in_the_nodes_place():
    tree = Tree()
    first = tree.add(tree.root, [1], Origin.USER)
    node = tree.add(
        tree.root,
        [10, 11, 12, 13],
        Origin.MODEL,
        logprobs=[-1.0, -2.0, -3.0, -4.0],
        top=[[(10, -1.0)], None, [(12, -3.0)], None],
        approx=True,
        sampling={"top_k": 5},
        seed=42,
        created=123.0,
        meta={"role": "assistant", "bookmark": "here", "hidden": True},
    )
    last = tree.add(tree.root, [2], Origin.USER)
    kid = tree.add(node, [14], Origin.MODEL)
    head = tree.split(node, 3)

    assert head.id == 5 and tree.nodes[5] is head and node.id == 2 and tree.nodes[2] is node
    assert tree.root.children == [first, head, last]  # the same place among its siblings
    assert head.parent is tree.root and head.children == [node] and node.parent is head
    assert node.children == [kid] and kid.parent is node
    assert head.tokens == [10, 11, 12] and node.tokens == [13]
    assert head.logprobs == [-1.0, -2.0, -3.0] and node.logprobs == [-4.0]
    assert head.top == [[(10, -1.0)], None, [(12, -3.0)]] and node.top == [None]
    assert (head.origin, head.approx, head.sampling, head.seed, head.created) == (
        Origin.MODEL,
        True,
        {"top_k": 5},
        42,
        123.0,
    )
    assert head.meta == {"role": "assistant"}  # only what applies to both halves
    assert node.meta == {"role": "assistant", "bookmark": "here", "hidden": True}
    assert node.path_tokens() == [10, 11, 12, 13] and kid.end == 5
    assert (head.start, head.end, node.start) == (0, 3, 3)
    assert tree.add(tree.root, [], Origin.USER).id == 6  # ids go on after the head


def test_split_inherits_only_the_role_and_the_writer():
    assert INHERITED_META == frozenset({"role", "model"})
    tree = Tree()
    node = tree.add(tree.root, [1, 2], Origin.USER, meta={"bookmark": "b"})
    assert tree.split(node, 1).meta == {}


def test_split_at_every_offset_keeps_the_path():
    for offset in (1, 2, 3, 4):
        tree = Tree()
        (node,) = chain(tree, [1, 2, 3, 4, 5])
        head = tree.split(node, offset)
        assert len(head.tokens) == offset and node.path_tokens() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("offset", [0, 3, -1, 5])
def test_split_refuses_an_offset_outside_the_node(offset):
    tree = Tree()
    (node,) = chain(tree, [1, 2, 3])
    with pytest.raises(ValueError) as info:
        tree.split(node, offset)
    assert str(info.value) == f"split offset {offset} outside node of 3 tokens"
    assert node.tokens == [1, 2, 3] and tree.root.children == [node] and len(tree.nodes) == 2


def test_split_hands_the_kv_to_the_engines_hook():
    calls = []

    def split_kv(kv, offset):
        calls.append((kv, offset))
        return f"{kv}[:{offset}]", f"{kv}[{offset}:]"

    tree = Tree()
    tree.split_kv = split_kv
    (node,) = chain(tree, [1, 2, 3])
    node.kv = "kv"
    head = tree.split(node, 2)
    assert calls == [("kv", 2)]
    assert head.kv == "kv[:2]" and node.kv == "kv[2:]"


def test_split_without_a_hook_drops_the_kv():
    tree = Tree()
    (node,) = chain(tree, [1, 2, 3])
    node.kv = object()
    head = tree.split(node, 1)
    assert head.kv is None and node.kv is None
    assert Tree.split_kv is None


# -- locate --------------------------------------------------------------------------------
def test_locate_finds_the_node_and_offset_of_each_position():
    tree = Tree()
    a, b, c = chain(tree, [1, 2, 3], [4], [5, 6])
    want = [(a, 0), (a, 1), (a, 2), (b, 0), (c, 0), (c, 1), (c, 2)]
    assert [tree.locate(c, p) for p in range(7)] == want  # 6: the end of the path
    assert tree.locate(b, 4) == (b, 1)  # the end of a shorter path
    assert tree.locate(a, 1) == (a, 1)


def test_locate_skips_empty_nodes():
    tree = Tree()
    a = tree.add(tree.root, [1, 2], Origin.USER)
    empty = tree.add(a, [], Origin.MODEL)
    b = tree.add(empty, [3], Origin.MODEL)
    assert tree.locate(b, 2) == (b, 0)
    assert tree.locate(b, 3) == (b, 1)
    assert tree.locate(empty, 2) == (empty, 0)
    assert tree.locate(tree.root, 0) == (tree.root, 0)


def test_origins_are_their_strings():
    assert [o.value for o in Origin] == ["root", "user", "model", "edit", "import"]
    assert Origin("model") is Origin.MODEL and Origin.USER == "user"


def test_a_root_never_splits():
    """Even a root holding tokens (a file written by something else) is not split: the
    head would have no parent to take its place under."""
    root = Node(id=0, tokens=[1, 2], origin=Origin.ROOT)
    tree = Tree.from_nodes(root, {0: root})
    with pytest.raises(AssertionError, match="^the root holds no tokens$"):
        tree.split(root, 1)
