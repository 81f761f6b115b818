"""Search across every branch of a tree: plain text or a regular expression.

Headless and pure (standard library and the tree only): the editor's search dialog and
``loomterm bench`` call :func:`search_tree` with a :class:`NodeTexts` that turns token
ids into text.

What is searched is what the document shows. Each node's text is decoded *in its
path's context*: the UTF-8 decoder carries its state from the parent into the child,
so a character whose bytes are spread over two nodes belongs to the node where it
completes, exactly as the editor shows it (``tui.document``). A match may cross node
boundaries: each node is searched together with the end of the text above it, and a
match is reported once, at the node where it ends (every path through that node holds
it), with its offset in that path's text. For a plain query the text above is as long
as the query needs; a regular expression sees :data:`REGEX_LOOKBACK` characters above
the node, so a match reaching further back than that is not found.

Decoded text is cached per node (:class:`NodeTexts`), keyed by the node's token count
and the decoder state it starts from, so a search after the first costs the matching
alone, and a node that grew, moved or changed context is decoded again.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass

from loomterm.errors import InputError
from loomterm.tree import Node

REGEX_LOOKBACK = 256  # characters above a node that a regular expression may start in
SNIPPET = 30  # characters of context on each side of a hit in its snippet
LIMIT = 1000  # hits reported at most (the result says when there were more)

TokenBytes = Callable[[int], bytes]
_State = tuple[bytes, int]  # an incremental UTF-8 decoder's state
_FRESH: _State = (b"", 0)


@dataclass(frozen=True)
class Query:
    """What to look for.

    Attributes:
        text: The text, or the pattern when ``regex``.
        regex: Read ``text`` as a Python regular expression (``^`` and ``$`` match at
            line ends).
        case: Match case exactly (default: case-insensitive).
    """

    text: str
    regex: bool = False
    case: bool = False

    def compile(self) -> re.Pattern[str]:
        """The pattern; a bad regular expression raises :class:`InputError` in one
        line, naming where it is wrong."""
        flags = re.MULTILINE | (0 if self.case else re.IGNORECASE)
        if not self.regex:
            return re.compile(re.escape(self.text), flags)
        try:
            return re.compile(self.text, flags)
        except re.error as exc:
            where = f" at position {exc.pos}" if exc.pos is not None else ""
            raise InputError(f"bad regular expression: {exc.msg}{where}") from None


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
        nodes: How many nodes were searched.
    """

    hits: list[Hit]
    more: bool
    nodes: int


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


def search_tree(root: Node, query: Query, texts: NodeTexts, limit: int = LIMIT) -> SearchResult:
    """Every match of ``query`` in the text of the tree under ``root`` (see the module
    docstring for what is matched and where a hit is reported)."""
    pattern = query.compile()
    if not query.text:
        return SearchResult([], False, 0)
    lookback = max(0, len(query.text) - 1) if not query.regex else REGEX_LOOKBACK
    hits: list[Hit] = []
    searched = 0
    # (node, decoder state before it, chars of the path above it, the end of that text)
    stack: list[tuple[Node, _State, int, str]] = [(root, _FRESH, 0, "")]
    while stack:
        node, state, offset, above = stack.pop()
        text, after = texts.text(node, state)
        searched += 1
        # ``above`` is the end of the text above (snippet included); a match may start
        # in its last ``lookback`` characters. Scanning from there, not slicing, lets
        # ``^``, ``\b`` and look-behinds see the character before that start.
        hay = above + text
        begin = len(above)
        for found in pattern.finditer(hay, max(0, begin - lookback)):
            start, end = found.span()
            if end <= begin or start == end:
                continue  # ends above this node (found there) or matches nothing
            if len(hits) >= limit:
                return SearchResult(hits, True, searched)
            hits.append(
                Hit(
                    node=node,
                    char=offset - begin + start,
                    length=end - start,
                    before=hay[max(0, start - SNIPPET) : start],
                    match=hay[start:end],
                    after=hay[end : end + SNIPPET],
                )
            )
        if node.children:
            tail = (above + text)[-(max(lookback, SNIPPET) + 1) :]
            for child in reversed(node.children):
                stack.append((child, after, offset + len(text), tail))
    return SearchResult(hits, False, searched)


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
