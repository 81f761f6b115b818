"""From a changed text to the smallest token splice that makes it.

``plan_edit`` compares the old and new text, re-tokenizes only the changed region (one
whole token of margin on each side, since a token next to an edit may merge with it:
"cat" + "s" -> "cats") and returns the token range to replace and the tokens to put
there, trimmed of any common token prefix and suffix.

``plan_retype`` is the other kind of edit: the change lies inside one node the writer
is writing, whose tokens are replaced in place (no new branch).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from loomterm.engine.text import TokenText, common_prefix, common_suffix
from loomterm.errors import EmptyEditError
from loomterm.tree import WRITER, Node


def plan_edit(
    codec: TokenText,
    encode: Callable[[str], list[int]],
    old_tokens: list[int],
    new_text: str,
    stops: Collection[int] = (),
) -> tuple[int, int, list[int]]:
    """``(start, end, inserted)``: replacing ``old_tokens[start:end]`` with ``inserted``
    gives tokens whose text is ``new_text``. Special tokens in the re-tokenized region
    stay (see :func:`respell`), but for the ``stops`` (end-of-text ids) that end the
    path when the change reaches the end of the text: writing on after a generation
    that stopped continues the text, so the new branch leaves the stop out (the old
    branch keeps it) and the model is not asked to go on after its own end. Raises
    :class:`EmptyEditError` when nothing changes."""
    kept = before_stops(codec, old_tokens, new_text, stops)
    if kept < len(old_tokens):
        start, end, inserted = plan_edit(codec, encode, old_tokens[:kept], new_text)
        return start, (len(old_tokens) if end == kept else end), inserted
    pieces = codec.pieces(old_tokens)
    old_text = "".join(pieces)
    if new_text == old_text:
        raise EmptyEditError("empty edit: the text is unchanged")
    offsets = [0]
    for piece in pieces:
        offsets.append(offsets[-1] + len(piece))
    whole = codec.complete_after(old_tokens)
    whole[-1] = True  # the end is always a place to cut, even after stray bytes
    special = codec.special_ids
    cp = common_prefix(old_text, new_text)
    cs = common_suffix(old_text, new_text, min(len(old_text), len(new_text)) - cp)
    cut = len(old_text) - cs
    # The change with every special token at its edges, then one whole token more on
    # each side (a token next to an edit may merge with it).
    a = max(i for i in range(len(offsets)) if offsets[i] <= cp and whole[i])
    while a > 0 and old_tokens[a - 1] in special:
        a -= 1
    a = max((i for i in range(a) if whole[i]), default=0)
    b = min(i for i in range(len(offsets)) if offsets[i] >= cut and whole[i])
    while b < len(old_tokens) and old_tokens[b] in special:
        b += 1
    b = min((i for i in range(b + 1, len(offsets)) if whole[i]), default=b)
    old_mid = old_tokens[a:b]
    new_mid = respell(
        old_mid,
        [x - offsets[a] for x in offsets[a : b + 1]],
        special,
        new_text[offsets[a] : len(new_text) - (len(old_text) - offsets[b])],
        (cp - offsets[a], cut - offsets[a]),
        encode,
        at_text_start=offsets[a] == 0,
    )
    k = common_prefix(old_mid, new_mid)
    ks = common_suffix(old_mid, new_mid, min(len(old_mid), len(new_mid)) - k)
    start, end = a + k, b - ks
    inserted = new_mid[k : len(new_mid) - ks]
    if start == end and not inserted:
        raise EmptyEditError("empty edit: the tokens are unchanged")
    return start, end, inserted


def before_stops(
    codec: TokenText, old_tokens: list[int], new_text: str, stops: Collection[int]
) -> int:
    """How many of ``old_tokens`` an edit to ``new_text`` is planned over: all, or all
    but the trailing ``stops`` (zero-width end-of-text tokens) when the change reaches
    the end of the text (``plan_edit``)."""
    kept = len(old_tokens)
    while (
        kept > 1 and old_tokens[kept - 1] in stops and not codec.token_bytes(old_tokens[kept - 1])
    ):
        kept -= 1
    if kept < len(old_tokens):
        old_text = codec.decode(old_tokens)
        cp = common_prefix(old_text, new_text)
        if common_suffix(old_text, new_text, min(len(old_text), len(new_text)) - cp) > 0:
            return len(old_tokens)  # the text's end is unchanged: the stops stay after it
    return kept


def respell(
    tokens: list[int],
    offsets: list[int],
    special: Collection[int],
    new_text: str,
    change: tuple[int, int],
    encode: Callable[[str], list[int]],
    at_text_start: bool = False,
) -> list[int]:
    """Tokens for ``new_text``, a changed version of the text of ``tokens`` (token
    ``i`` starts at char ``offsets[i]``; ``offsets[-1]`` is the old length), where the
    old chars ``change[0]:change[1]`` were replaced.

    Special tokens have no text, so the text alone cannot say where they go: each
    keeps its place in the text around the change. One strictly inside the replaced
    chars goes with them. Where text is inserted at a special token's place, it goes
    before it (typing after "Hello" lands before the end-of-turn token that follows),
    except at the very start of the text, where it goes after (after ``<bos>``). The
    text between special tokens is encoded piece by piece, without start-of-text."""
    begin, end = change
    shift = len(new_text) - offsets[-1]
    chunks: list[int | tuple[int, int]] = []  # special token ids and (from, to) of text
    at = 0
    for token, x in zip(tokens, offsets, strict=False):
        if token not in special:
            continue
        if begin < x < end:
            continue  # deleted with the text around it
        moved = x > end or (x == end and (x > begin or not (x == 0 and at_text_start)))
        where = x + shift if moved else x
        chunks.append((at, where))
        chunks.append(token)
        at = where
    chunks.append((at, len(new_text)))
    out: list[int] = []
    for chunk in chunks:
        if isinstance(chunk, tuple):
            if chunk[1] > chunk[0]:
                out.extend(encode(new_text[chunk[0] : chunk[1]]))
        else:
            out.append(chunk)
    return out


# The most tokens an in-place retype computes again (the changed node's tokens from the
# change on). Past it, the change is an ordinary splice, which moves the rest.
RETYPE_LIMIT = 256


@dataclass(frozen=True)
class Retype:
    """One node's tokens replaced in place: ``path[index]`` gets ``tokens``, of which
    the first ``keep`` are its old ones (their KV stays)."""

    index: int
    keep: int
    tokens: list[int]


def in_run(path: list[Node], run: Collection[int]) -> Callable[[int], bool]:
    """Which nodes of ``path`` (the root left off) a retype may change in place: the
    last one when it has no children and the writer wrote it (origin user or edit) or
    ``run`` holds it, or one of ``run`` (ids of the nodes the current typing run made)
    whose nodes below are all the run's, one chain, ending in a leaf (``Loom.retype``).
    A node with a branch the path does not show is never changed in place: the
    branch's text would change with it (an undo that cut the path leaves the undone
    words there)."""
    ids = set(run)

    def rewritable(index: int) -> bool:
        target, below = path[index], path[index + 1 :]
        if not below:
            return not target.children and (target.origin in WRITER or target.id in ids)
        return (
            target.id in ids
            and len(target.children) == 1
            and all(item.id in ids and len(item.children) <= 1 for item in below[:-1])
            and below[-1].id in ids
            and not below[-1].children
        )

    return rewritable


def plan_retype(
    codec: TokenText,
    encode: Callable[[str, bool], list[int]],
    path: list[Node],
    new_text: str,
    rewritable: Callable[[int], bool],
) -> Retype | None:
    """The in-place change that makes ``path``'s text read ``new_text``, when the whole
    change lies inside the text of one node ``path[i]`` with ``rewritable(i)``; that
    node's new text is encoded whole between its special tokens, which stay
    (:func:`respell`). None when there is no such node, the node would be left empty,
    or more than :data:`RETYPE_LIMIT` tokens would be computed again."""
    tokens = [t for node in path for t in node.tokens]
    pieces = codec.pieces(tokens)
    old_text = "".join(pieces)
    if new_text == old_text:
        return None
    offsets = [0]
    for piece in pieces:
        offsets.append(offsets[-1] + len(piece))
    whole = codec.complete_after(tokens)
    cp = common_prefix(old_text, new_text)
    cs = common_suffix(old_text, new_text, min(len(old_text), len(new_text)) - cp)
    change_end = len(old_text) - cs  # the change is old_text[cp:change_end]
    first = 0  # token index where path[i] starts
    char = 0  # char where path[i] starts
    for i, node in enumerate(path):
        last = first + len(node.tokens)
        end_char = offsets[last]
        if char <= cp and change_end <= end_char and rewritable(i) and whole[first] and whole[last]:
            text = new_text[char : len(new_text) - (len(old_text) - end_char)]
            if not text:
                return None
            new = respell(
                node.tokens,
                [x - char for x in offsets[first : last + 1]],
                codec.special_ids,
                text,
                (cp - char, change_end - char),
                lambda part: encode(part, False),
                at_text_start=char == 0,
            )
            keep = common_prefix(node.tokens, new)
            if not new or len(new) - keep > RETYPE_LIMIT:
                return None
            return Retype(i, keep, new)
        first, char = last, end_char
    return None
