"""The document model behind the editor pane: one path's text, where each token sits in
it, the user's not-yet-synced edits, and the wrapped line layout.

No Textual here, so it can be tested and timed on its own.

Text is held as *blocks* (``blocks.py``), one per node of the path, each a list of
token pieces (the text each token completes; see ``loomterm.engine.text``). Building a
block costs one UTF-8 decode per token and no object per token, which keeps a sibling
switch on a 10,000-token document inside one frame. A local edit cuts blocks at the edit and puts
the typed text in a *pending* block, so the screen changes at once and the engine
catches up later (``Loom.edit`` on the whole text, when typing pauses).

Positions: a *char* is an index into :attr:`DocumentModel.text`; a *position* is a
token index on the path (``Node.start + offset``).
"""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from itertools import accumulate

from loomterm.tree import Node
from loomterm.tui.blocks import PENDING, Block, kind_of
from loomterm.tui.piece_cache import PIECE_CONTEXT, PieceCache, TokenBytes, tokens_before
from loomterm.tui.sanitize import cells
from loomterm.tui.wrap import char_at_cell, rewrap

_WORD = re.compile(r"\w+|[^\w\s]+", re.UNICODE)


class DocumentModel:
    """The text on screen and everything needed to edit, lay out and map it.

    Attributes:
        text: What the screen shows.
        blocks: The text as blocks, in order.
        path: The nodes of the shown path (root first), as last built by :meth:`show`.
        node: The path's last node (the engine state the text started from).
        synced_text: The text of ``node``'s path as the engine knows it.
        caret: Char index of the caret.
        version: Bumped on every change of ``text``.
        starts, ends: Per visual line, its first char and the char after its last.
    """

    def __init__(self, token_bytes: TokenBytes, special_ids: set[int] | None = None) -> None:
        self.token_bytes = token_bytes
        self.special_ids = special_ids or set()
        self.text = ""
        self.blocks: list[Block] = []
        self.block_starts: list[int] = []
        self.path: list[Node] = []
        self._built: list[int] = []  # tokens of path[i] held by blocks[i]
        self._pristine = 0  # leading blocks still 1:1 with path[:n], untouched by edits
        self._tail = 0  # chars of a flushed partial character ending the last block
        self._tail_block: Block | None = None  # the block they end (edits may drop it)
        self.node: Node | None = None
        self.synced_text = ""
        self.caret = 0
        self.goal_column: int | None = None
        self.version = 0
        self.changed_from: int | None = 0  # first char changed since the view last drew
        self.width = 80
        self.starts: list[int] = [0]
        self.ends: list[int] = [0]
        self.has_roles = False
        self.role_marks: list[tuple[int, str]] = []  # (char, role) where a turn begins
        # Decoded nodes, so going back to a branch costs nothing per token.
        self._decoded = PieceCache()

    # -- state ---------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        """True when the text holds edits the engine has not seen."""
        return self.text != self.synced_text

    @property
    def length(self) -> int:
        return len(self.text)

    @property
    def shown_tokens(self) -> int:
        """Tokens of the path the text was built from (streaming may have shown fewer
        than ``node`` holds by now)."""
        return sum(self._built)

    # -- building from the tree -----------------------------------------------------
    def show(self, node: Node) -> None:
        """Show ``node``'s path, dropping any local edits. Blocks of nodes shared with
        what is shown are kept, so only the changed suffix is decoded."""
        path = node.path()
        keep = 0
        limit = min(len(path), len(self.path), self._pristine)
        while (
            keep < limit
            and path[keep] is self.path[keep]
            and self._built[keep] == len(path[keep].tokens)
        ):
            keep += 1
        if self._tail and keep and self.blocks[keep - 1] is self._tail_block:
            # The last kept block ends in a flushed partial character: take it back off
            # (the path below it decodes those bytes again). Edits may have put blocks
            # after it, or split or removed it (then it is not kept, and nothing is cut).
            last = self.blocks[keep - 1]
            last.pieces[-1] = last.pieces[-1][: len(last.pieces[-1]) - self._tail]
            last.ends[-1] -= self._tail
        self._tail = 0
        self._tail_block = None
        blocks = self.blocks[:keep]
        built = self._built[:keep]
        char = self.block_starts[keep - 1] + blocks[-1].length if keep else 0
        kept_text = self.text[:char]
        pos = blocks[-1].pos0 + len(blocks[-1].pieces) if keep else 0
        role = blocks[-1].role if keep else None
        context = tokens_before(path, keep)
        new_texts: list[str] = []
        tail = ""
        for item in path[keep:]:
            tokens = list(item.tokens)
            pieces, ends, text, tail = self._decode(item, tokens, context)
            role = item.meta.get("role", role)
            blocks.append(Block(item, 0, pieces, kind_of(item), role, pos, ends))
            built.append(len(tokens))
            new_texts.append(text)
            pos += len(tokens)
            context = (context + tokens)[-PIECE_CONTEXT:]
        if tail and blocks and blocks[-1].pieces:
            last = blocks[-1]
            last.pieces[-1] += tail
            last.ends[-1] += len(tail)
            new_texts.append(tail)
            self._tail = len(tail)
            self._tail_block = last
        self.blocks = blocks
        self._built = built
        self.path = path
        self._pristine = len(blocks)
        self.node = node
        self.text = kept_text + "".join(new_texts)
        self.synced_text = self.text
        self._changed(char)
        self.caret = min(self.caret, len(self.text))

    def _decode(
        self, node: Node, tokens: list[int], context: list[int]
    ) -> tuple[list[str], list[int], str, str]:
        """``node``'s pieces, their ends, its text and the flushed tail (cached)."""
        return self._decoded.decode(self.token_bytes, node, tokens, context)

    def forget(self, node: Node) -> None:
        """``node``'s tokens were replaced in place: its decoded text, and the blocks
        built from it, are stale (the next :meth:`show` decodes it again)."""
        self._decoded.forget(node)
        for index, item in enumerate(self.path[: self._pristine]):
            if item is node:
                self._pristine = index
                break

    def extend(self, node: Node, start: int, pieces: list[str]) -> bool:
        """Streamed tokens ``start..`` of ``node`` arrived with their ``pieces``. Appends
        them if ``node`` ends (or will end) the shown path and nothing was edited.
        Returns True when the text grew."""
        if self.dirty or not self.path:
            return False
        last = self.path[-1]
        if node is not last:
            if node.parent is not last or start != 0:
                return False
            self._drop_tail()
            role = self.blocks[-1].role if self.blocks else None
            pos = self.blocks[-1].pos0 + len(self.blocks[-1].pieces) if self.blocks else 0
            self.blocks.append(Block(node, 0, [], kind_of(node), role, pos))
            self.path.append(node)
            self._built.append(0)
            self._pristine = len(self.blocks)
            self.node = node
        shown = self._built[-1]
        if start > shown:
            return False  # a gap: wait for the rebuild at the end
        pieces = pieces[shown - start :]
        if not pieces:
            return False
        self._drop_tail()
        block = self.blocks[-1]
        total = block.length
        for piece in pieces:
            total += len(piece)
            block.ends.append(total)
        block.pieces.extend(pieces)
        self._built[-1] = shown + len(pieces)
        # Streamed pieces may differ from a full decode at a partial character; the
        # final rebuild decodes this block again.
        self._pristine = len(self.blocks) - 1
        at = len(self.text)
        self.text += "".join(pieces)
        self.synced_text = self.text
        self._changed(at)
        return True

    def rebase(self, node: Node, synced_text: str) -> None:
        """The engine caught up with ``synced_text`` (now ``node``'s path) while more
        typing went on: keep the text on screen, and count it from ``node``."""
        self.node = node
        self.synced_text = synced_text
        self.path = node.path()
        self._built = [len(item.tokens) for item in self.path]
        self._pristine = 0  # the blocks on screen no longer match the path 1:1

    def _drop_tail(self) -> None:
        if self._tail and self.blocks and self.blocks[-1] is self._tail_block:
            last = self.blocks[-1]
            last.pieces[-1] = last.pieces[-1][: len(last.pieces[-1]) - self._tail]
            last.ends[-1] -= self._tail
            self.text = self.text[: len(self.text) - self._tail]
            self.synced_text = self.text
        self._tail = 0
        self._tail_block = None

    # -- local edits ---------------------------------------------------------------
    def insert(self, text: str) -> None:
        """Type or paste ``text`` at the caret."""
        if not text:
            return
        at = self.caret
        index = self._cut(at)
        previous = self.blocks[index - 1] if index else None
        if previous is not None and previous.kind == PENDING:
            previous.pieces[0] += text
            previous.ends[0] += len(text)
        else:
            role = previous.role if previous is not None else None
            self.blocks.insert(index, Block(None, 0, [text], PENDING, role, -1))
        self._pristine = min(self._pristine, index)
        self.text = self.text[:at] + text + self.text[at:]
        self.caret = at + len(text)
        self._changed(at)

    def delete(self, start: int, end: int) -> None:
        """Remove chars ``start..end``."""
        start, end = max(0, start), min(len(self.text), end)
        if start >= end:
            return
        first = self._cut(start)
        last = self._cut(end)
        del self.blocks[first:last]
        self._pristine = min(self._pristine, first)
        self.text = self.text[:start] + self.text[end:]
        if self.caret > start:
            self.caret = max(start, self.caret - (end - start))
        self._changed(start)

    def become(self, text: str) -> None:
        """Edit the text into ``text`` by the smallest change: one cut and one insert
        between the common start and end (what an undo of typing puts back)."""
        old = self.text
        head = len(os.path.commonprefix([old, text]))
        room = min(len(old), len(text)) - head
        tail = len(os.path.commonprefix([old[::-1][:room], text[::-1][:room]]))
        self.delete(head, len(old) - tail)
        self.caret = head
        self.insert(text[head : len(text) - tail])

    def word_ended(self) -> bool:
        """True when the character just before the caret is a space or line break that
        ends a word (the place an undo step of typing ends)."""
        caret, text = self.caret, self.text
        return caret >= 2 and text[caret - 1].isspace() and not text[caret - 2].isspace()

    def backspace(self) -> None:
        if self.caret > 0:
            self.delete(self.caret - 1, self.caret)

    def delete_forward(self) -> None:
        self.delete(self.caret, self.caret + 1)

    def replace_text(self, text: str) -> None:
        """Replace all the text with ``text`` (one pending block)."""
        self.blocks = [Block(None, 0, [text], PENDING, None, -1)] if text else []
        self._pristine = 0
        self.text = text
        self.caret = min(self.caret, len(text))
        self._changed(0)

    def _cut(self, char: int) -> int:
        """Make a block boundary at ``char``; return the index of the first block that
        starts there (``len(blocks)`` at the end)."""
        if not self.blocks or char >= len(self.text):
            return len(self.blocks)
        index = bisect_right(self.block_starts, char) - 1
        offset = char - self.block_starts[index]
        if offset == 0:
            return index
        left, right = self.blocks[index].split(offset)
        self.blocks[index : index + 1] = [left, right]
        self._pristine = min(self._pristine, index)
        self._index_blocks()
        return index + 1

    # -- layout --------------------------------------------------------------------
    def _index_blocks(self) -> None:
        self.block_starts = [0] + list(accumulate(block.length for block in self.blocks))[:-1]
        if not self.blocks:
            self.block_starts = []

    def _changed(self, at: int) -> None:
        """The text changed from char ``at`` on: re-index blocks and re-wrap."""
        self.version += 1
        self.changed_from = at if self.changed_from is None else min(self.changed_from, at)
        self.goal_column = None
        self._index_blocks()
        self._roles()
        self.reflow(at)

    def _roles(self) -> None:
        marks: list[tuple[int, str]] = []
        previous = None
        explicit = False
        for block, start in zip(self.blocks, self.block_starts, strict=True):
            if block.node is not None and "role" in block.node.meta:
                explicit = True
            if block.role != previous and block.role is not None:
                marks.append((start, block.role))
            previous = block.role
        self.has_roles = explicit
        self.role_marks = marks

    def set_width(self, width: int) -> None:
        """Wrap lines to ``width`` cells (one is kept free for the caret)."""
        width = max(2, width)
        if width != self.width:
            self.width = width
            self.changed_from = 0
            self.reflow(0)

    def take_changed_from(self) -> int | None:
        """The first char changed since the last call (None: nothing changed)."""
        at, self.changed_from = self.changed_from, None
        return at

    def reflow(self, at: int = 0) -> None:
        """Re-wrap from the logical line holding char ``at`` to the end."""
        self.starts, self.ends = rewrap(self.text, at, self.width, self.starts, self.ends)

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def line_of(self, char: int) -> int:
        """The visual line the caret sits on when at ``char``."""
        return max(0, bisect_right(self.starts, char) - 1)

    def column_of(self, char: int) -> int:
        """Cells from the start of ``char``'s visual line to ``char``."""
        line = self.line_of(char)
        return cells(self.text[self.starts[line] : char])

    def char_at(self, line: int, column: int) -> int:
        """The char nearest cell ``column`` of visual ``line``."""
        return char_at_cell(self.text, self.starts, self.ends, line, column)

    # -- caret moves ---------------------------------------------------------------
    def move_to(self, char: int) -> None:
        self.caret = max(0, min(char, len(self.text)))
        self.goal_column = None

    def move_left(self) -> None:
        self.move_to(self.caret - 1)

    def move_right(self) -> None:
        self.move_to(self.caret + 1)

    def move_word_left(self) -> None:
        target = 0
        for match in _WORD.finditer(self.text, max(0, self.caret - 4096), self.caret):
            if match.start() < self.caret:
                target = match.start()
        self.move_to(target)

    def move_word_right(self) -> None:
        # Like most editors: stop at the end of this word, or of the next one.
        match = _WORD.search(self.text, self.caret)
        self.move_to(match.end() if match else len(self.text))

    def move_home(self) -> None:
        self.move_to(self.starts[self.line_of(self.caret)])

    def move_end(self) -> None:
        line = self.line_of(self.caret)
        end = self.ends[line]
        # On a wrapped line the end char belongs to the next line: stop before it.
        if line + 1 < len(self.starts) and self.starts[line + 1] == end and end > self.starts[line]:
            end -= 1
        self.move_to(end)

    def move_lines(self, count: int) -> None:
        """Up (negative) or down by ``count`` visual lines, keeping the column."""
        column = self.goal_column if self.goal_column is not None else self.column_of(self.caret)
        line = self.line_of(self.caret) + count
        if line < 0:
            self.move_to(0)
        elif line >= len(self.starts):
            self.move_to(len(self.text))
        else:
            self.caret = self.char_at(line, column)
        self.goal_column = column

    # -- mapping to tokens and nodes -----------------------------------------------
    def block_at(self, char: int) -> tuple[int, Block] | None:
        """The block holding ``char`` (skipping empty blocks), with its index."""
        if not self.blocks or not 0 <= char < len(self.text):
            return None
        index = bisect_right(self.block_starts, char) - 1
        while index > 0 and self.blocks[index].length == 0:
            index -= 1
        while (
            index < len(self.blocks)
            and char >= self.block_starts[index] + self.blocks[index].length
        ):
            index += 1
        if index >= len(self.blocks):
            return None
        return index, self.blocks[index]

    def token_at(self, char: int) -> tuple[Node, int, int] | None:
        """``(node, index in node, path position)`` of the token holding ``char``, or
        None for pending text."""
        found = self.block_at(char)
        if found is None:
            return None
        index, block = found
        if block.node is None:
            return None
        j = block.token_index(char - self.block_starts[index])
        return block.node, block.first + j, block.pos0 + j

    def token_under_caret(self) -> tuple[Node, int, int] | None:
        """The token the caret is on; at the very end, the last token."""
        char = self.caret if self.caret < len(self.text) else len(self.text) - 1
        return self.token_at(char)

    def node_before_caret(self) -> Node | None:
        """The node holding the text just before the caret (the root at the start)."""
        if self.caret == 0 or not self.path:
            return self.path[0] if self.path else None
        found = self.token_at(self.caret - 1)
        return found[0] if found else None

    def end_of(self, node: Node) -> int | None:
        """The char just after ``node``'s text, if ``node`` is on the shown path."""
        for index, block in enumerate(self.blocks):
            if block.node is node and block.first + len(block.pieces) >= len(node.tokens):
                return self.block_starts[index] + block.length
        if self.path and node is self.path[0]:
            return 0
        return None

    def char_of_position(self, position: int) -> int:
        """The char where path token ``position`` begins (the end for the path length)."""
        for index, block in enumerate(self.blocks):
            if block.node is None or not block.pieces:
                continue
            if block.pos0 <= position < block.pos0 + len(block.pieces):
                j = position - block.pos0
                return self.block_starts[index] + (block.ends[j - 1] if j else 0)
        return len(self.text)

    def split_caret(self) -> tuple[int, str]:
        """Where generating from the caret starts: ``(tokens kept, partial text)``.

        Whole tokens before the caret are kept; the typed-over part of a token the
        caret sits inside is returned as text to append (so "Hel|lo" continues after
        "Hel"). Only meaningful when the text is synced.
        """
        if self.caret >= len(self.text):
            return (self.node.end if self.node is not None else 0), ""
        found = self.block_at(self.caret)
        if found is None:
            return 0, ""
        index, block = found
        offset = self.caret - self.block_starts[index]
        j = block.token_index(offset)
        begin = block.ends[j - 1] if j else 0
        partial = block.pieces[j][: offset - begin] if block.pieces else ""
        return block.pos0 + j, partial
