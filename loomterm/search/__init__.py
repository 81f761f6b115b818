"""Search across every branch of a tree: plain text or a regular expression.

Headless and pure (standard library and the tree only): the editor's search dialog and
``loomterm bench`` call :func:`search_tree` with a :class:`NodeTexts` that turns token
ids into text.

What is searched is what the document shows. Each node's text is decoded *in its
path's context*: the UTF-8 decoder carries its state from the parent into the child,
so a character whose bytes are spread over two nodes belongs to the node where it
completes, exactly as the editor shows it (``tui.document``). A match may cross node
boundaries: the hits at a node are exactly the matches in the text of its path (from
the root to the end of the node) that end in it. A match is reported once, at the node
where it ends (every path through that node holds it), with its offset in that path's
text. However far back a match starts, it is found, and matches never overlap, as on
the whole path: the search of a node resumes the scan of its parent where the text
below could not have changed it (``loomterm.search.reach`` works out how far back that
is for a pattern: a few characters for a plain query or ``\\b\\w+ly\\b``, a line for
``.*``). A pattern that can match across any amount of text (``(?s).*``) must read each
path whole for every node; on a large tree it is refused as too costly, in one line.

Patterns run in linear time (RE2) wherever RE2 can say them, else on a backtracking
engine with a deadline (``loomterm.search.pattern``); a search takes ``stopped`` (checked
between nodes) and ``deadline``, so the editor runs it on a worker and drops it when a
newer one starts.

Archived branches (the editor's "hide branch": ``meta["hidden"]`` on a branch's first
node) are left out unless ``Query.archived``.

Decoded text is cached per node (:class:`NodeTexts`), keyed by the node's token count
and the decoder state it starts from, so a search after the first costs the matching
alone, and a node that grew, moved or changed context is decoded again.
"""

from __future__ import annotations

import bisect
import codecs
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from loomterm.errors import InputError
from loomterm.search.pattern import (
    Matcher,
    PatternTooSlow,
    SearchStopped,
    compile_query,
    python_pattern,
)
from loomterm.search.reach import Reach, analyse
from loomterm.tree import Node

COSTLY = 250_000  # tokens a barrier-less pattern may read in all (``_check_cost``)
SNIPPET = 30  # characters of context on each side of a hit in its snippet
LIMIT = 1000  # hits reported at most (the result says when there were more)
DEADLINE_S = 10.0  # a search that would take longer ends in one line instead

TokenBytes = Callable[[int], bytes]
_State = tuple[bytes, int]  # an incremental UTF-8 decoder's state
_FRESH: _State = (b"", 0)


@dataclass(frozen=True)
class Query:
    """What to look for.

    Attributes:
        text: The text, or the pattern when ``regex``.
        regex: Read ``text`` as a Python regular expression (``^`` and ``$`` match at
            line ends), run by RE2 where it can (``loomterm.search.pattern``).
        case: Match case exactly (default: case-insensitive).
        archived: Search archived (hidden) branches too (default: left out, as the
            branch pane leaves them out).
    """

    text: str
    regex: bool = False
    case: bool = False
    archived: bool = False

    def compile(self) -> re.Pattern[str]:
        """The pattern as Python's ``re`` reads it (the reference reading: compiling
        runs nothing); a bad regular expression raises :class:`InputError` in one
        line, naming where it is wrong. The search matches with :meth:`matcher`."""
        return python_pattern(self.text, self.regex, self.case)

    def matcher(self) -> Matcher:
        """What the search matches with: RE2, or a backtracking engine with a deadline
        (``loomterm.search.pattern``)."""
        return compile_query(self.text, self.regex, self.case)


@dataclass(frozen=True)
class Hit:
    """One match.

    Attributes:
        node: The node where the match ends; every path through it holds the match.
        char: Where the match starts in the text of ``node``'s path (from the root).
        length: Characters matched.
        before, match, after: The snippet: some text before the hit, the hit, some
            after (raw text; a screen makes it safe to draw).
    """

    node: Node
    char: int
    length: int
    before: str
    match: str
    after: str

    @property
    def end(self) -> int:
        return self.char + self.length


@dataclass(frozen=True)
class SearchResult:
    """Hits in tree order (parents before children, siblings oldest first).

    Attributes:
        hits: At most ``limit`` of them.
        more: True when the search stopped at ``limit``.
        nodes: How many nodes were searched (the root, which holds no text, not
            counted, as the status bar counts them).
        archived: How many archived branches were left out (``Query.archived`` off).
    """

    hits: list[Hit]
    more: bool
    nodes: int
    archived: int = 0


class NodeTexts:
    """Each node's text in its path's context, decoded once and kept.

    ``token_bytes(token_id)`` gives a token's bytes (``TokenText.token_bytes``, the
    same function the document uses).
    """

    def __init__(self, token_bytes: TokenBytes) -> None:
        self.token_bytes = token_bytes
        # node id -> (token count, decoder state in, text, decoder state out)
        self._cache: dict[int, tuple[int, _State, str, _State]] = {}

    def text(self, node: Node, state: _State) -> tuple[str, _State]:
        """``node``'s text when the decoder stands at ``state`` before it, and the
        decoder's state after it."""
        count = len(node.tokens)
        hit = self._cache.get(node.id)
        if hit is not None and hit[0] == count and hit[1] == state:
            return hit[2], hit[3]
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        decoder.setstate(state)
        token_bytes = self.token_bytes
        text = decoder.decode(b"".join(token_bytes(t) for t in node.tokens))
        out = decoder.getstate()
        self._cache[node.id] = (count, state, text, out)
        return text, out

    def forget(self) -> None:
        """Drop every cached text."""
        self._cache.clear()


# Over 60 lines: one depth-first walk, each step reading and writing the path's state
# (its texts, where each starts, where matching resumes); what needs none of it (the
# time checks, a hit's snippets) is split out.
def search_tree(
    root: Node,
    query: Query,
    texts: NodeTexts,
    limit: int = LIMIT,
    stopped: Callable[[], bool] | None = None,
    deadline: float | None = None,
) -> SearchResult:
    """Every match of ``query`` in the text of the tree under ``root`` (see the module
    docstring for what is matched and where a hit is reported). A pattern that would
    have to read every path whole for every node of a large tree raises
    :class:`InputError` (too costly) instead of freezing the editor; a search past
    ``deadline`` raises :class:`PatternTooSlow` (an InputError) (a ``time.monotonic()`` value; default
    :data:`DEADLINE_S` from now). ``stopped()`` True raises :class:`SearchStopped`."""
    pattern = query.matcher()
    if not query.text:
        return SearchResult([], False, 0)
    if deadline is None:
        deadline = time.monotonic() + DEADLINE_S
    reach = analyse(pattern.source, pattern.flags)
    if reach.endless:
        _check_cost(root, query)
    hits: list[Hit] = []
    searched = skipped = 0
    path_texts: list[str] = []  # the texts of the nodes from the root to this one
    path_starts: list[int] = []  # where each starts in the path's text
    # (node, its depth, decoder state before it, where matching resumes in the path)
    stack: list[tuple[Node, int, _State, int]] = [(root, 0, _FRESH, 0)]
    while stack:
        node, depth, state, resume = stack.pop()
        _check_time(stopped, deadline)
        if depth and not query.archived and is_archived(node):
            skipped += 1
            continue
        del path_texts[depth:], path_starts[depth:]
        above = path_starts[-1] + len(path_texts[-1]) if depth else 0
        text, after = texts.text(node, state)
        path_texts.append(text)
        path_starts.append(above)
        searched += 1 if depth else 0  # the root holds no text: counted as the status bar does
        stable = _stable_start(reach, path_texts, path_starts) if node.children else -1
        # Matching resumes where the scan of the whole path would stand (``resume``);
        # the text before it is there for look-behinds, ``^``, ``\b`` and snippets.
        origin = max(0, resume - max(reach.behind + 1, SNIPPET))
        hay = _path_from(path_texts, path_starts, origin)
        stable_end = resume
        for found_start, found_end in pattern.spans(hay, resume - origin, deadline):
            start, end = found_start + origin, found_end + origin
            if start <= stable:
                stable_end = end  # found the same way whatever text follows
            if end <= above or start == end:
                continue  # ends above this node (found there) or matches nothing
            if len(hits) >= limit:
                return SearchResult(hits, True, searched, skipped)
            hits.append(_hit(node, hay, origin, start, end))
        # Below this node, the scan stands where it stood after the last match (or the
        # last failed start) that read only text of this path: the text below cannot
        # change those. An empty match ends at its start, so it never sets this.
        resume_below = max(stable_end, stable + 1, resume)
        for child in reversed(node.children):
            stack.append((child, depth + 1, after, resume_below))
    return SearchResult(hits, False, searched, skipped)


def _check_time(stopped: Callable[[], bool] | None, deadline: float) -> None:
    """Raise :class:`SearchStopped` when ``stopped()``, :class:`PatternTooSlow` past
    ``deadline``."""
    if stopped is not None and stopped():
        raise SearchStopped
    if time.monotonic() > deadline:
        raise PatternTooSlow("search stopped at its time limit: the tree is too large for it")


def _hit(node: Node, hay: str, origin: int, start: int, end: int) -> Hit:
    """The match ``start..end`` of the path's text (``hay`` holds it from ``origin``)."""
    begin, stop = start - origin, end - origin
    return Hit(
        node=node,
        char=start,
        length=end - start,
        before=hay[max(0, begin - SNIPPET) : begin],
        match=hay[begin:stop],
        after=hay[stop : stop + SNIPPET],
    )


def is_archived(node: Node) -> bool:
    """True when the branch starting at ``node`` is archived (hidden: the editor's
    archive command marks its first node; everything below it is archived with it)."""
    return bool(node.meta.get("hidden"))


def _stable_start(reach: Reach, texts: list[str], starts: list[int]) -> int:
    """The last start, in the path's text, where an attempt of the pattern reads only
    text of the path as it is (-1: none): whatever text comes below, the attempts at
    it and before it end the same (``loomterm.search.reach``)."""
    end = starts[-1] + len(texts[-1])
    if reach.bounded:
        return end - reach.count
    if reach.barriers is None:
        return -1
    need = reach.count  # the ``count``-th barrier from the end is the last safe start
    for text, start in zip(reversed(texts), reversed(starts), strict=True):
        found = _last_barriers(reach.barriers, text, need)
        if len(found) >= need:
            return start + found[-need]
        need -= len(found)
    return -1


def _last_barriers(barriers: re.Pattern[str], text: str, need: int) -> list[int]:
    """Where the last ``need`` barriers of ``text`` are (all of them when fewer): read
    from the end in growing windows, as they are usually near it."""
    window = 64 * need
    while True:
        begin = max(0, len(text) - window)
        found = [m.start() for m in barriers.finditer(text, begin)]
        if len(found) >= need or begin == 0:
            return found
        window *= 4


def _path_from(texts: list[str], starts: list[int], origin: int) -> str:
    """The path's text from character ``origin`` to the end of its last node."""
    first = bisect.bisect_right(starts, origin) - 1
    return "".join([texts[first][origin - starts[first] :], *texts[first + 1 :]])


def _check_cost(root: Node, query: Query) -> None:
    """Refuse a barrier-less pattern (every path read whole for every node) on a tree
    where that reads more than :data:`COSTLY` tokens."""
    total = 0
    stack = [(root, 0)]
    while stack:
        node, above = stack.pop()
        if above and not query.archived and is_archived(node):
            continue
        end = above + len(node.tokens)
        total += end
        stack.extend((child, end) for child in node.children)
    if total > COSTLY:
        raise InputError(
            "regular expression too costly here: it can match across any amount of"
            " text ((?s).*, [\\s\\S]*, ...); bound it, e.g. .{0,2000}"
        )


def branch_label(node: Node) -> str:
    """Where ``node`` is, as the branch taken at each branch point from the root:
    ``2.1.3`` is the second branch, then its first, then its third (``main`` when
    no branch point is above it)."""
    steps = []
    item = node
    while item.parent is not None:
        siblings = item.parent.children
        if len(siblings) > 1:
            steps.append(str(siblings.index(item) + 1))
        item = item.parent
    return ".".join(reversed(steps)) or "main"
