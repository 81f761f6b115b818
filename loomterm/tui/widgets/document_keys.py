"""What the editor pane does with keys, the mouse and pastes: caret moves, local edits
(typing, backspace, delete, enter, paste) and clicks, as a mixin of
:class:`~loomterm.tui.widgets.document_view.DocumentView` (which keeps the key table,
``BINDINGS``, and draws the document).

An edit changes the :class:`~loomterm.tui.document.DocumentModel` at once and posts
``DocumentView.Edited``; the app hands it to the engine when typing pauses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events

from loomterm.tui.paste import paste_text

if TYPE_CHECKING:
    from loomterm.tui.document import DocumentModel

# A key with one of these is a binding, even when the terminal sends it as a character.
MODIFIER_PREFIXES = ("alt+", "ctrl+", "super+", "meta+", "hyper+")


class DocumentKeys:
    """Mixed into ``DocumentView``: its key, paste and mouse handlers and the caret
    moves and edits its bindings run. Uses the view's ``doc``, ``locked``, ``follow``,
    ``scroll_y``, ``_gutter``, ``caret_moved`` and ``document_changed``."""

    doc: DocumentModel
    locked: bool
    follow: bool
    _gutter: int

    # -- mouse ---------------------------------------------------------------------
    def _char_at_offset(self, x: int, y: int) -> int:
        line = round(self.scroll_y) + y
        if line >= self.doc.line_count:
            return self.doc.length
        column = x - (self._gutter + 1 if self._gutter else 1)
        return self.doc.char_at(line, max(0, column))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        char = self._char_at_offset(offset.x, offset.y)
        self.doc.move_to(char)
        self.caret_moved()
        if event.button == 3 or event.ctrl or event.chain >= 2:
            self.post_message(self.TokenClicked(self, char))

    # -- editing -------------------------------------------------------------------
    def _edit(self) -> None:
        self.follow = self.doc.caret >= self.doc.length
        self.document_changed()
        self.post_message(self.Edited(self))

    def _can_edit(self) -> bool:
        if self.locked:
            self.app.bell()
            return False
        return True

    async def _on_key(self, event: events.Key) -> None:
        # A terminal sends alt+s as ESC s: a printable character, but a key for a binding.
        if (
            event.is_printable
            and event.character is not None
            and not event.key.startswith(MODIFIER_PREFIXES)
        ):
            event.stop()
            event.prevent_default()
            if self._can_edit():
                self.doc.insert(event.character)
                self._edit()

    def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        if event.text and self._can_edit():
            self.doc.insert(paste_text(event.text))
            self._edit()

    def action_backspace(self) -> None:
        if self.doc.caret > 0 and self._can_edit():
            self.doc.backspace()
            self._edit()

    def action_delete_right(self) -> None:
        if self.doc.caret < self.doc.length and self._can_edit():
            self.doc.delete_forward()
            self._edit()

    def action_newline(self) -> None:
        if self._can_edit():
            self.doc.insert("\n")
            self._edit()

    # -- caret moves ---------------------------------------------------------------
    def _move(self, move) -> None:
        move()
        self.caret_moved()

    def action_cursor_left(self) -> None:
        self._move(self.doc.move_left)

    def action_cursor_right(self) -> None:
        self._move(self.doc.move_right)

    def action_cursor_up(self) -> None:
        self._move(lambda: self.doc.move_lines(-1))

    def action_cursor_down(self) -> None:
        self._move(lambda: self.doc.move_lines(1))

    def action_word_left(self) -> None:
        self._move(self.doc.move_word_left)

    def action_word_right(self) -> None:
        self._move(self.doc.move_word_right)

    def action_line_home(self) -> None:
        self._move(self.doc.move_home)

    def action_line_end(self) -> None:
        self._move(self.doc.move_end)

    def action_doc_start(self) -> None:
        self._move(lambda: self.doc.move_to(0))

    def action_doc_end(self) -> None:
        self._move(lambda: self.doc.move_to(self.doc.length))

    def action_page_up(self) -> None:
        page = max(1, self.scrollable_content_region.height - 1)
        self._move(lambda: self.doc.move_lines(-page))

    def action_page_down(self) -> None:
        page = max(1, self.scrollable_content_region.height - 1)
        self._move(lambda: self.doc.move_lines(page))
