"""What the editor pane does with keys, the mouse and pastes: caret moves, local edits
(typing, backspace, delete, enter, paste) and clicks, as a mixin of
:class:`~loomterm.tui.widgets.document_view.DocumentView` (which keeps the key table,
``BINDINGS``, and draws the document).

**One ordered input path.** Every key and paste the document receives is applied by
:meth:`DocumentKeys._on_key` / ``_on_paste``, in the order they arrive in this widget's
message queue (one queue, one consumer). Textual would run a key's binding only once the
key has bubbled up to the app through the queues of every container above, so an enter
(a binding) typed fast after some characters used to land after the characters that
followed it. Here the document looks the key up in the bindings that are active now
(its own, the screen's, the app's, after the user's key map) and runs the action at
once. While the document is locked (a job whose result will replace it is running),
input is held in arrival order, not refused, and applied when the lock lifts; anything
after held input waits behind it, except escape (stop), which interrupts.

An edit changes the :class:`~loomterm.tui.document.DocumentModel` at once and posts
``DocumentView.Edited``; the app hands it to the engine when typing pauses.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual import events

from loomterm.tui.key_order import bindings_now, is_text, run_bound
from loomterm.tui.paste import paste_text

if TYPE_CHECKING:
    from loomterm.tui.document import DocumentModel

# The document's own actions that change the text: held, like characters, while locked.
EDIT_ACTIONS = frozenset({"backspace", "delete_right", "newline"})
# Actions that run at once even behind held input: they interrupt what holds it.
INTERRUPTS = frozenset({"stop"})

Input = events.Key | events.Paste | Callable[[], object]


class DocumentKeys:
    """Mixed into ``DocumentView``: its key, paste and mouse handlers and the caret
    moves and edits its bindings run. Uses the view's ``doc``, ``locked``, ``follow``,
    ``scroll_y``, ``_gutter``, ``caret_moved`` and ``document_changed``."""

    doc: DocumentModel
    locked: bool
    follow: bool
    _gutter: int
    _held: deque[Input]

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
        # Edits run only when unlocked (held input waits), so this guards direct calls.
        return not self.locked

    # -- the ordered input path ---------------------------------------------------------
    async def _on_key(self, event: events.Key) -> None:
        if is_text(event):
            event.stop()
            event.prevent_default()
            if self._held or self.locked:
                self._held.append(event)
            else:
                self._type(event.character)
            return
        found = bindings_now(self, event.key)
        if not found:
            return  # nothing here uses it: it bubbles on
        event.stop()
        event.prevent_default()
        node, action = found[0]
        if action not in INTERRUPTS and (
            self._held or (self.locked and node is self and action in EDIT_ACTIONS)
        ):
            self._held.append(event)
            return
        await run_bound(self, found)

    def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        if not event.text:
            return
        if self._held or self.locked:
            self._held.append(event)
        else:
            self._type(paste_text(event.text))

    def after_input(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once every key and paste received so far has been applied
        (quitting waits for the typing before it, however fast it came)."""
        if self._held:
            self._held.append(callback)
        else:
            self.call_later(callback)

    def apply_held(self) -> None:
        """Apply the held input now, locked or not: the editor is leaving, and the job
        whose result would replace the document will not come back to it."""
        if self._held:
            self.locked = False  # replayed by ``watch_locked``

    def watch_locked(self, locked: bool) -> None:
        if not locked and self._held:
            self.call_later(self._replay)

    async def _replay(self) -> None:
        """Apply held input in order until it is all applied or the document locks
        again (a held ctrl+g, say)."""
        while self._held and not self.locked:
            item = self._held.popleft()
            if isinstance(item, events.Paste):
                self._type(paste_text(item.text))
            elif isinstance(item, events.Key):
                if is_text(item):
                    self._type(item.character)
                else:
                    await run_bound(self, bindings_now(self, item.key))
            else:
                item()

    def _type(self, text: str) -> None:
        """Put ``text`` (a character or a paste) at the caret."""
        self.doc.insert(text)
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
