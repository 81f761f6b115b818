"""Search across every branch (``loomterm.search``): what it finds against a naive
search of every root-to-leaf path, matches across node boundaries and split
characters, regular expressions, and the one-line error of a bad one."""

from __future__ import annotations

import re

import pytest

from loomterm.bench import corpus_text
from loomterm.bench.search import DEMO_NODES, demo_tree
from loomterm.errors import InputError
from loomterm.search import NodeTexts, Query, branch_label, search_tree
from loomterm.tree import Origin, Tree


def byte_texts() -> NodeTexts:
    """Token ids that are bytes: any UTF-8 character can fall across two nodes."""
    return NodeTexts(lambda token: bytes([token]))


def add(tree: Tree, parent, text: bytes):
    return tree.add(parent, list(text), Origin.USER)


@pytest.fixture(scope="module")
def demo():
    return demo_tree(list(corpus_text().encode()[:60_000]), DEMO_NODES)


def path_text(node) -> str:
    return bytes(node.path_tokens()).decode("utf-8", errors="replace")


@pytest.mark.parametrize(
    "query",
    [
        Query("the"),
        Query("The"),
        Query("fen", case=True),
        Query(r"\b[A-Z][a-z]+ed\b", regex=True),
        Query(r"^[A-Z]", regex=True),
    ],
    ids=lambda q: q.text,
)
def test_every_match_on_every_path_is_found_once(demo, query):
    texts = byte_texts()
    result = search_tree(demo.root, query, texts, limit=10**6)
    assert not result.more and result.nodes == len(demo.nodes) - 1  # the root not counted
    pattern = query.compile()
    by_node: dict[int, set] = {}
    for hit in result.hits:
        by_node.setdefault(hit.node.id, set()).add((hit.char, hit.match))
    # The spec: the hits at a node are the matches in its path's text that end in it.
    for node in demo.nodes.values():
        text = path_text(node)
        above = len(path_text(node.parent)) if node.parent is not None else 0
        want = {(m.start(), m.group()) for m in pattern.finditer(text) if m.end() > above}
        assert by_node.get(node.id, set()) == want, node
    # A plain query's matches on a whole path are exactly the hits on its nodes.
    if not query.regex:
        for leaf in (n for n in demo.nodes.values() if not n.children):
            want = {(m.start(), m.group()) for m in pattern.finditer(path_text(leaf))}
            got = set().union(*(by_node.get(n.id, set()) for n in leaf.path()))
            assert got == want, leaf
    assert result.hits, "the query matched nothing: the test would prove nothing"
    keys = [(h.node.id, h.char) for h in result.hits]
    assert len(keys) == len(set(keys))  # reported once


def test_a_match_across_nodes_is_reported_where_it_ends():
    tree = Tree()
    a = add(tree, tree.root, b"Hello wor")
    b = add(tree, a, b"ld and more")
    c = add(tree, a, b"k is done")
    hits = search_tree(tree.root, Query("WORLD"), byte_texts()).hits
    assert [(h.node, h.char, h.match) for h in hits] == [(b, 6, "world")]
    assert (hits[0].before, hits[0].after) == ("Hello ", " and more")
    hits = search_tree(tree.root, Query("work"), byte_texts()).hits
    assert [(h.node, h.char) for h in hits] == [(c, 6)]
    assert branch_label(b) == "1" and branch_label(c) == "2" and branch_label(a) == "main"


def test_a_character_split_between_nodes_is_found():
    tree = Tree()
    a = add(tree, tree.root, "caf\u00e9".encode()[:-1])  # the é's first byte
    b = add(tree, a, "\u00e9".encode()[-1:] + b" au lait")
    texts = byte_texts()
    hits = search_tree(tree.root, Query("CAF\u00c9"), texts).hits
    assert [(h.node, h.char, h.match) for h in hits] == [(b, 0, "caf\u00e9")]
    assert search_tree(tree.root, Query("\ufffd"), texts).hits == []  # never half a char


def test_regex_anchors_see_the_text_above_the_node():
    tree = Tree()
    a = add(tree, tree.root, b"x" * 400 + b"\nline")
    b = add(tree, a, b" two\nthird")
    hits = search_tree(tree.root, Query(r"^\w+", regex=True), byte_texts()).hits
    assert [(h.node, h.match) for h in hits] == [
        (tree.root.children[0], "x" * 400),
        (a, "line"),
        (b, "third"),
    ]


def test_cached_text_follows_growth_and_moves():
    tree = Tree()
    a = add(tree, tree.root, b"abc")
    b = add(tree, tree.root, "\u00e9".encode()[:1])
    c = add(tree, a, "\u00e9".encode()[1:] + b"xyz")
    texts = byte_texts()
    assert search_tree(tree.root, Query("xyz"), texts).hits[0].char == 4  # "abc" + a broken byte
    c.tokens.extend(b" more")
    assert search_tree(tree.root, Query("more"), texts).hits[0].node is c
    tree.move(c, b)  # now the é completes across b and c
    hits = search_tree(tree.root, Query("\u00e9xyz"), texts).hits
    assert [(h.node, h.char) for h in hits] == [(c, 0)]


def test_a_bad_regex_is_one_line_and_an_empty_query_finds_nothing():
    with pytest.raises(InputError, match=r"^bad regular expression: .*position \d+$"):
        Query("(unclosed", regex=True).compile()
    tree = Tree()
    add(tree, tree.root, b"text")
    assert search_tree(tree.root, Query(""), byte_texts()).hits == []
    result = search_tree(tree.root, Query("t"), byte_texts(), limit=1)
    assert len(result.hits) == 1 and result.more


# -- matches that start far above the node, and the scan's resume point ----------------

SPEC_PATTERNS = [
    Query("aa"),
    Query("aba"),
    Query("a b", case=True),
    Query(r"a+", regex=True),
    Query(r"\bb\w*a\b", regex=True),
    Query(r"a.*b", regex=True),
    Query(r"a.*?b", regex=True),
    Query(r"[^\n]{3,}$", regex=True),
    Query(r"(?<=a )b+(?=\s)", regex=True),
    Query(r"(a|ab)(c|bcd)?", regex=True),
    Query(r"(\w)\1", regex=True),
    Query(r"b[ab ]+a|x*", regex=True),
    Query(r"(?s)a.{0,40}?B", regex=True),
    Query(r"(?s)A.*B", regex=True),
    Query(r"^a|b$", regex=True),
    Query(r"[^b]+a", regex=True),
    Query(r"a(?=.*B)", regex=True),
    Query(r"(?i)A[^\n]*b\b", regex=True),
    Query(r"(?:a b|\n)+A", regex=True, case=True),
    Query(r"\ba[ab]*(?! )", regex=True),
    Query(r"ab|a", regex=True),
    Query(r"a b\b|a", regex=True),
]


def spec_hits(tree: Tree, pattern) -> set:
    """The spec, done naively: at each node, the non-empty matches in its path's whole
    text that end in it."""
    want = set()
    for node in tree.nodes.values():
        text = path_text(node)
        above = len(path_text(node.parent)) if node.parent is not None else 0
        for m in pattern.finditer(text):
            if m.end() > above and m.end() > m.start():
                want.add((node.id, m.start(), m.group()))
    return want


def random_tree(seed: int) -> Tree:
    import random

    rng = random.Random(seed)
    tree = Tree()
    made = [tree.root]
    for _ in range(rng.randint(3, 25)):
        size = rng.choice((0, 1, 1, 2, 3, 5, 8, 20))
        text = "".join(rng.choice("aab  \nbAB") for _ in range(size))
        made.append(add(tree, rng.choice(made), text.encode()))
    return tree


@pytest.mark.parametrize("query", SPEC_PATTERNS, ids=lambda q: q.text)
def test_random_trees_match_the_spec_exactly(query):
    """Short nodes over a tiny alphabet: matches run across many nodes, overlap, depend
    on what follows (greedy, look-ahead, ``$``) and start far above the node."""
    pattern = query.compile()
    found_any = False
    for seed in range(60):
        tree = random_tree(seed)
        result = search_tree(tree.root, query, byte_texts(), limit=10**6)
        got = {(h.node.id, h.char, h.match) for h in result.hits}
        want = spec_hits(tree, pattern)
        assert got == want, (seed, query.text)
        found_any = found_any or bool(want)
    assert found_any


def test_a_match_reaching_far_above_its_node_is_found():
    """Before: a regular expression saw 256 characters above a node, so a match that
    started further back was lost."""
    tree = Tree()
    a = add(tree, tree.root, b"BEGIN " + b"x" * 600)
    b = add(tree, a, b" END of it")
    hits = search_tree(tree.root, Query(r"BEGIN.*END", regex=True), byte_texts()).hits
    assert [(h.node, h.char, h.length) for h in hits] == [(b, 0, 610)]
    assert hits[0].before == "" and hits[0].after == " of it"


def test_a_long_pattern_is_found_across_nodes():
    """A 300-character regular expression (a pasted paragraph) across a node boundary."""
    words = b"one two three four five six seven eight nine ten " * 6
    tree = Tree()
    a = add(tree, tree.root, b"> " + words[:290])
    b = add(tree, a, words[290:] + b"<")
    pattern = re.escape(words.decode()).replace(r"\ ", r"\s+")
    assert len(pattern) > 300
    hits = search_tree(tree.root, Query(pattern, regex=True), byte_texts()).hits
    assert [(h.node, h.char, h.length) for h in hits] == [(b, 2, len(words))]
    hits = search_tree(tree.root, Query(words.decode()), byte_texts()).hits
    assert [(h.node, h.char) for h in hits] == [(b, 2)]


def test_overlapping_plain_matches_are_counted_as_on_the_whole_path():
    """Before: "aa" in "aa" + "a" was reported twice (the child searched its own
    window again), though the path's text "aaa" holds it once."""
    tree = Tree()
    a = add(tree, tree.root, b"aa")
    add(tree, a, b"a")
    hits = search_tree(tree.root, Query("aa"), byte_texts()).hits
    assert [(h.node, h.char) for h in hits] == [(a, 0)]


def test_a_pattern_matching_any_amount_of_text_is_refused_on_a_big_tree(demo):
    with pytest.raises(InputError, match=r"^regular expression too costly here: .*\{0,2000\}$"):
        search_tree(demo.root, Query(r"(?s)the.*light", regex=True), byte_texts())
    # bounded, it is searched
    result = search_tree(demo.root, Query(r"(?s)the.{0,200}light", regex=True), byte_texts())
    assert result.hits and not result.more


# -- archived branches ----------------------------------------------------------------


def test_archived_branches_are_left_out_unless_asked_for():
    tree = Tree()
    a = add(tree, tree.root, b"the lamp ")
    kept = add(tree, a, b"is lit")
    gone = add(tree, a, b"is out, the lamp")
    below = add(tree, gone, b" and the lamp again")
    gone.meta["hidden"] = True
    texts = byte_texts()
    result = search_tree(tree.root, Query("lamp"), texts)
    assert [h.node for h in result.hits] == [a]
    assert (result.nodes, result.archived) == (2, 1)  # a, kept (the root not counted)
    result = search_tree(tree.root, Query("lamp", archived=True), texts)
    assert [h.node for h in result.hits] == [a, gone, below]
    assert (result.nodes, result.archived) == (4, 0)
    assert kept.parent is a


def test_how_far_a_pattern_reads():
    """``search.reach``: what lets a node resume its parent's scan a few characters back."""
    from loomterm.search.reach import analyse

    flags = re.MULTILINE | re.IGNORECASE
    plain = analyse(re.escape("the light"), flags)
    assert plain.bounded and plain.count == 10  # 9 characters, then the one after
    words = analyse(r"\b\w+ly\b", flags)
    assert not words.bounded and words.count == 1  # "ly" eats no barrier: one is enough
    assert all(words.barriers.fullmatch(c) for c in " \n.,") and not words.barriers.match("a")
    line = analyse(r"the.*light", flags)
    assert line.barriers.pattern == "[\\\n]" and line.count == 1
    assert analyse(r"(?s)a.*b", flags).endless and analyse(r"[\s\S]+", flags).endless
    assert analyse(r"(?<=ab)x(?=cd)", flags).behind >= 3
