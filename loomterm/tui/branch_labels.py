"""A branch pane row's text: a node's first words, a folded run's first and last
words, and a folded run's words fitted to the room its row leaves them. Text only, safe
to draw (``tui.sanitize``); the pane (``tui.widgets.branch_tree``) styles it.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.cells import cell_len, set_cell_size

from loomterm.tree import Node
from loomterm.tui.branch_rows import Row
from loomterm.tui.sanitize import safe_line

PREVIEW = 40  # characters of a row's text (a folded run's tail: as many again)


def preview(row: Row, text_of: Callable[[Node], str]) -> str:
    """The row's text, short and safe (kept on the row: rows are rebuilt when the
    tree changes, and a growing node's row is refreshed by its token count)."""
    if row.preview and (row.preview_full or row.preview_len == len(row.chain.last.tokens)):
        return row.preview
    row.preview = node_preview(row, text_of) if row.count == 1 else run_preview(row, text_of)
    row.preview_len = len(row.chain.last.tokens)
    # Tokens are only ever appended, so a preview cut at its length is final (a
    # folded run's last words are not: they follow its last node).
    row.preview_full = row.count == 1 and row.preview.endswith("\u2026")
    return row.preview


def run_preview(row: Row, text_of: Callable[[Node], str]) -> str:
    """A folded run's first words (returned) and last words (kept in ``row.tail``);
    a short run is all of its text, with no tail."""
    nodes = row.chain.nodes()
    head = ""
    for node in nodes:
        head += text_of(node)
        if len(head) > PREVIEW * 2:
            break
    tail = ""
    for node in reversed(nodes):
        tail = text_of(node) + tail
        if len(tail) > PREVIEW:
            break
    head = safe_line(head.strip() or head)
    row.tail = ""
    if len(head) <= PREVIEW and len(nodes) <= 2 and len(tail) >= len(head):
        return head  # the whole run fits the head: nothing to show twice
    row.tail = safe_line(tail.strip() or tail)[-PREVIEW:]
    return head[:PREVIEW]


def node_preview(row: Row, text_of: Callable[[Node], str]) -> str:
    """A one-node row's first words, with an ellipsis where they were cut."""
    text = ""
    for node in row.chain.nodes():
        text += text_of(node)
        if len(text) > PREVIEW * 2:
            break
    text = safe_line(text.strip() or text)
    return text[:PREVIEW] + ("\u2026" if len(text) > PREVIEW else "")


def fit_run(head: str, tail: str, room: int) -> str:
    """``head…tail`` in ``room`` cells: the tail gets up to half, the head the rest; both
    cut between words where a word boundary is near."""
    if not tail:
        if cell_len(head) <= room:
            return head
        return set_cell_size(head, room - 1).rstrip() + "\u2026"
    tail = tail.strip()
    keep = min(cell_len(tail), (room - 1) // 2)
    cut = tail
    while cell_len(cut) > keep:
        cut = cut[1:]
    if cut != tail and not tail[-len(cut) - 1].isspace() and " " in cut.rstrip():
        cut = cut.split(" ", 1)[1]  # not the end of a word: start at the next one
    tail = cut.lstrip()
    size = max(0, room - 1 - cell_len(tail))
    short = set_cell_size(head, size) if cell_len(head) > size else head
    if len(short) < len(head) and not head[len(short)].isspace() and " " in short.strip():
        short = short.rstrip().rsplit(" ", 1)[0]  # not a whole word: leave it out
    return f"{short.rstrip()}\u2026{tail}"
