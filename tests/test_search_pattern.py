"""Search patterns cannot freeze the editor (``loomterm.search.pattern``): what RE2 can
say runs in linear time and matches exactly what Python's ``re`` matches; the rest runs
on a backtracking engine that stops at a deadline with one line."""

from __future__ import annotations

import re
import time
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loomterm.errors import InputError
from loomterm.search import NodeTexts, Query, search_tree, syntax
from loomterm.search.pattern import (
    UNICODE_DIGIT,
    UNICODE_SPACE,
    UNICODE_WORD,
    PatternTooSlow,
    SearchStopped,
    compile_query,
    to_re2,
)
from loomterm.search.reach import analyse
from loomterm.tree import Origin, Tree

re2 = pytest.importorskip("re2")


@pytest.mark.parametrize(
    ("pattern", "engine"),
    [
        ("(a|a)+$", "re2"),
        (r"\w+\s\d{2,5}", "re2"),
        (r"[^\W\d]+", "regex"),  # a complement inside a class: RE2 cannot say it
        (r"(?<=a)b", "regex"),
        (r"(\w)\1", "regex"),
        (r"\bword\b", "regex"),  # \b over Unicode
        (r"(?a)\bword\b", "re2"),  # \b over ASCII: RE2's own
        (r"a{0,2000}", "regex"),  # over RE2's repeat limit
        (r"(?s).{0,20}x", "re2"),
    ],
)
def test_each_pattern_goes_to_the_engine_that_can_run_it(pattern, engine):
    assert compile_query(pattern, regex=True, case=False).engine == engine


def test_plain_text_is_a_literal_and_a_bad_pattern_one_line():
    assert compile_query("(a|a)+$", regex=False, case=True).engine == "re"
    with pytest.raises(InputError, match=r"^bad regular expression: .*position \d+$"):
        compile_query("(unclosed", regex=True, case=False)


def _bmp() -> str:
    return "".join(chr(c) for c in range(0x10000) if not 0xD800 <= c < 0xE000)


@pytest.mark.parametrize(
    ("spelled", "python"), [(UNICODE_SPACE, r"\s"), (UNICODE_WORD, r"\w"), (UNICODE_DIGIT, r"\d")]
)
def test_unicode_classes_spelled_for_re2_are_pythons(spelled, python):
    """RE2's own \\w, \\d and \\s are ASCII: the spelled-out classes match every
    character of the Basic Multilingual Plane exactly as Python's do."""
    chars = _bmp()
    ours = {m.start() for m in re2.compile(f"[{spelled}]").finditer(chars)}
    theirs = {m.start() for m in re.compile(python).finditer(chars)}
    assert ours == theirs


ATOMS = st.sampled_from(
    ["a", "b", "é", "É", "ß", "1", "٣", " ", ".", r"\w", r"\W", r"\d", r"\D", r"\s", r"\S"]
    + ["[ab]", "[^a\n]", "[a-fé]", r"[\d_]", "^", "$", r"\A", r"\Z", "\n", r"\.", "[É-é]"]
    + ["{", "}", "]", r"\x61", r"\u00e9", r"\U000000c9", r"\t", "[]a]", "[^]a]", "[a-]"]
    + [r"[\]b]", r"\-", r"[\b\n]", r"[\s\S]", r"\b", r"\B", "[-a]", r"[\w.]", r"\{"]
)
ANCHORS = ("^", "$", r"\A", r"\Z", r"\b", r"\B")


@st.composite
def patterns(draw, depth: int = 2) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if depth and draw(st.booleans()):
            inner = draw(patterns(depth - 1))
            kind = draw(st.sampled_from(GROUPS))
            part = kind.format(inner)
        else:
            part = draw(ATOMS)
        if part not in ANCHORS:
            part += draw(st.sampled_from(REPEATS))
        parts.append(part)
    return "".join(parts)


# a whole pattern: global flags may lead it
WHOLE = (
    st.tuples(st.sampled_from(["", "", "(?i)", "(?s)", "(?a)", "(?m)"]), patterns())
    .map("".join)
    .filter(lambda pattern: _compiles(pattern))  # a group name used twice: refused
)


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


GROUPS = ["(?:{})", "({})", "{}|a", "(?i:{})", "(?s:{})", "(?-i:{})", "(?a:{})", "(?P<n>{})"]
GROUPS += ["(?={})", "(?!{})", "(?:(?<=a){})", "(?:(?<!b){})"]
REPEATS = ["", "", "*", "+", "?", "{1,3}", "{,2}", "*?", "+?", "??", "{2}", "{,}", "{1,}?"]


@settings(max_examples=300, deadline=None)
@given(
    pattern=WHOLE,
    text=st.text(alphabet="aAbBéÉßẞ1٣_ \n\t\u00a0.-", max_size=40),
    case=st.booleans(),
    pos=st.integers(0, 5),
)
def test_re2_finds_what_python_finds(pattern, text, case, pos):
    """Random patterns over Python's syntax: where RE2 runs one, its non-empty matches
    are Python's, from any start (empty matches are skipped by the search)."""
    matcher = compile_query(pattern, regex=True, case=case)
    if matcher.engine != "re2":
        return
    python = re.compile(pattern, matcher.flags)
    pos = min(pos, len(text))
    want = [m.span() for m in python.finditer(text, pos) if m.end() > m.start()]
    got = [span for span in matcher.spans(text, pos) if span[1] > span[0]]
    assert got == want


@settings(max_examples=300, deadline=None)
@given(pattern=WHOLE)
def test_the_reader_reads_every_pattern_of_its_grammar(pattern):
    """``search.syntax`` reads the grammar it claims (what Python's ``re`` compiles)."""
    re.compile(pattern)
    tree, _flags = syntax.parse(pattern)
    assert tree


# Python's regular expression alphabet, and characters that are ordinary in it
HOSTILE = st.text(alphabet="ab.^$*+?{}[]\\|()-,0129:=!<>Piasmx#\n", max_size=14)


@settings(max_examples=1000, deadline=None)
@given(
    pattern=HOSTILE,
    text=st.text(alphabet="ab\n{}[]-,129:=!<>P.*+?^$|()\\", max_size=30),
    case=st.booleans(),
)
def test_whatever_both_read_re2_matches_as_python(pattern, text, case):
    """Random strings of regex syntax: where ``re`` compiles one and the reader reads
    it, the RE2 pattern written from the reader's tree matches what ``re`` matches, and
    how far ``reach`` says an attempt reads holds (a wrong reading is caught here)."""
    flags = re.MULTILINE | (0 if case else re.IGNORECASE)
    try:
        with warnings.catch_warnings():  # "possible nested set": still read as Python did
            warnings.simplefilter("ignore", FutureWarning)
            python = re.compile(pattern, flags)
    except (re.error, RecursionError, OverflowError):
        return
    try:
        syntax.parse(pattern)
    except syntax.Unsupported:
        return
    want = [m.span() for m in python.finditer(text) if m.end() > m.start()]
    translated = to_re2(pattern, python.flags)
    if translated is not None:
        got = [m.span() for m in re2.finditer(translated, text) if m.end() > m.start()]
        assert got == want, translated
    reach = analyse(pattern, python.flags)
    for start, end in want:
        _check_reach(reach, text, start, end)


def _check_reach(reach, text: str, start: int, end: int) -> None:
    """A match from ``start`` ends no further than ``reach`` says an attempt reads."""
    if reach.endless:
        return
    if reach.bounded:
        assert end <= start + reach.count
        return
    barriers = [i for i in range(start, len(text)) if reach.barriers.fullmatch(text[i])]
    if len(barriers) >= reach.count:
        assert end <= barriers[reach.count - 1] + 1


def test_a_lone_surrogate_in_the_text_is_matched_by_the_other_engine():
    matcher = compile_query(r"b\w", regex=True, case=True)
    assert matcher.engine == "re2"
    assert list(matcher.spans("a\ud800 bc", 0)) == [(3, 5)]


def _tree_of(text: str, nodes: int) -> Tree:
    tree = Tree()
    parent = tree.root
    for _ in range(nodes):
        parent = tree.add(parent, list(text.encode()), Origin.MODEL)
    return tree


def test_the_catastrophic_pattern_of_the_red_team_answers_at_once():
    """``(a|a)+$`` over long runs of ``a`` ending in ``b`` took Python's engine 114 s
    (2^n paths); RE2 reads each character once. The bound is generous: this is a hang
    test, not a timing."""
    tree = _tree_of("a" * 20_000 + "b\n", 20)
    start = time.monotonic()
    result = search_tree(tree.root, Query("(a|a)+$", regex=True), NodeTexts(lambda t: bytes([t])))
    assert time.monotonic() - start < 5
    assert result.hits == [] and result.nodes == 20


def test_a_backtracking_pattern_stops_at_its_deadline_in_one_line():
    """A pattern only the backtracking engine can run (``\\b`` over Unicode) that
    explodes: one line at the deadline, not a frozen editor."""
    tree = _tree_of("a" * 40 + "!", 1)
    start = time.monotonic()
    with pytest.raises(PatternTooSlow) as caught:
        search_tree(
            tree.root,
            Query(r"(\w|\w)+\b$", regex=True),
            NodeTexts(lambda t: bytes([t])),
            deadline=time.monotonic() + 0.3,
        )
    assert time.monotonic() - start < 30
    assert "\n" not in str(caught.value) and str(caught.value).startswith("regular expression")


def test_a_search_stops_when_asked_between_nodes():
    tree = _tree_of("abc", 50)
    with pytest.raises(SearchStopped):
        search_tree(tree.root, Query("b"), NodeTexts(lambda t: bytes([t])), stopped=lambda: True)
