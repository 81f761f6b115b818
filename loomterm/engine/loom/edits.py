"""From a changed text to the smallest token splice that makes it.

``plan_edit`` compares the old and new text, re-tokenizes only the changed region (one
whole token of margin on each side, since a token next to an edit may merge with it:
"cat" + "s" -> "cats") and returns the token range to replace and the tokens to put
there, trimmed of any common token prefix and suffix.

``plan_retype`` is the other kind of edit: the change lies inside one node the writer
is writing, whose tokens are replaced in place (no new branch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loomterm.engine.text import TokenText, common_prefix, common_suffix
from loomterm.errors import EmptyEditError
from loomterm.tree import Node


def plan_edit(
    codec: TokenText,
    encode: Callable[[str], list[int]],
    old_tokens: list[int],
    new_text: str,
) -> tuple[int, int, list[int]]:
    """``(start, end, inserted)``: replacing ``old_tokens[start:end]`` with ``inserted``
    gives tokens whose text is ``new_text``. Raises :class:`EmptyEditError` when
    nothing changes."""
    pieces = codec.pieces(old_tokens)
    old_text = "".join(pieces)
    if new_text == old_text:
        raise EmptyEditError("empty edit: the text is unchanged")
    offsets = [0]
    for piece in pieces:
        offsets.append(offsets[-1] + len(piece))
    whole = codec.complete_after(old_tokens)
    whole[-1] = True  # the end is always a place to cut, even after stray bytes
    cp = common_prefix(old_text, new_text)
    cs = common_suffix(old_text, new_text, min(len(old_text), len(new_text)) - cp)
    # Cut one whole token outside the change on each side.
    a = max(i for i in range(len(offsets)) if offsets[i] <= cp and whole[i])
    a = max((i for i in range(a) if whole[i]), default=0)
    cut = len(old_text) - cs
    b = min(i for i in range(len(offsets)) if offsets[i] >= cut and whole[i])
    b = min((i for i in range(b + 1, len(offsets)) if whole[i]), default=b)
    middle = new_text[offsets[a] : len(new_text) - (len(old_text) - offsets[b])]
    new_mid = encode(middle) if middle else []
    old_mid = old_tokens[a:b]
    k = common_prefix(old_mid, new_mid)
    ks = common_suffix(old_mid, new_mid, min(len(old_mid), len(new_mid)) - k)
    start, end = a + k, b - ks
    inserted = new_mid[k : len(new_mid) - ks]
    if start == end and not inserted:
        raise EmptyEditError("empty edit: the tokens are unchanged")
    return start, end, inserted


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


def plan_retype(
    codec: TokenText,
    encode: Callable[[str, bool], list[int]],
    path: list[Node],
    new_text: str,
    rewritable: Callable[[int], bool],
) -> Retype | None:
    """The in-place change that makes ``path``'s text read ``new_text``, when the whole
    change lies inside the text of one node ``path[i]`` with ``rewritable(i)``; that
    node's new text is encoded whole (as a typed node's text is). None when there is
    no such node, the node would be left empty, or more than :data:`RETYPE_LIMIT`
    tokens would be computed again."""
    tokens = [t for node in path for t in node.tokens]
    pieces = codec.pieces(tokens)
    old_text = "".join(pieces)
    if new_text == old_text:
        return None
    whole = codec.complete_after(tokens)
    cp = common_prefix(old_text, new_text)
    cs = common_suffix(old_text, new_text, min(len(old_text), len(new_text)) - cp)
    change_end = len(old_text) - cs  # the change is old_text[cp:change_end]
    first = 0  # token index where path[i] starts
    char = 0  # char where path[i] starts
    for i, node in enumerate(path):
        last = first + len(node.tokens)
        end_char = char + sum(len(p) for p in pieces[first:last])
        if char <= cp and change_end <= end_char and rewritable(i) and whole[first] and whole[last]:
            text = new_text[char : len(new_text) - (len(old_text) - end_char)]
            if not text:
                return None
            new = encode(text, first == 0)
            keep = common_prefix(node.tokens, new)
            if not new or len(new) - keep > RETYPE_LIMIT:
                return None
            return Retype(i, keep, new)
        first, char = last, end_char
    return None
