"""The dialogs' text fields: Textual's ``Input`` and ``TextArea`` with their keys
applied in the order they were typed (``loomterm.tui.key_order``): a key's binding runs
in the field, at once, not after it has bubbled up to the app behind the characters
typed after it; enter in a :class:`Field` reaches its dialog (a :class:`FieldForm`) at
once, so a dialog that closes on enter has closed before the next key is read; and what
reaches a field after its dialog closed goes on to what has the focus now.

A field holds only what it can show. Textual draws a field's text as it is, so a
control character in it (pasted, or a session file's memory or setting) would reach
the terminal: ``ESC ] 2 ;`` retitles the window, ``ESC [ 7 m`` inverts the dialog.
Whatever enters a field, typed, pasted or set, goes through the sanitiser first
(``loomterm.sanitize``): an ESC is held and shown as ``␛``, and saved as that, since
the field is what the writer saw and chose."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual import events
from textual.widgets import Input, TextArea
from textual.widgets.text_area import Edit, EditResult

from loomterm.sanitize import safe_line, safe_text
from loomterm.tui.key_order import hand_on, is_text, run_at_once


class FieldForm:
    """Mixed into a screen whose :class:`Field` s' enter it takes at once (not through
    Textual's ``Input.Submitted`` message, which reaches the screen only after the
    keys typed after the enter have gone into the field)."""

    def field_submitted(self, field: Field) -> None:
        """Enter in ``field``."""
        raise NotImplementedError


class Field(Input):
    """A one-line text field whose backspace, arrows, enter and the dialog's own keys
    take effect in order with the characters around them."""

    async def action_submit(self) -> None:
        """Enter: the :class:`FieldForm` screen's at once; else Textual's message."""
        screen = self.screen
        if isinstance(screen, FieldForm):
            screen.field_submitted(self)
        else:
            await super().action_submit()

    async def _on_key(self, event: events.Key) -> None:
        # Runs before Input._on_key (Textual calls the subclass's handler first); a
        # character is left to it.
        if hand_on(self, event) or is_text(event):
            return
        await run_at_once(self, event)

    def _on_paste(self, event: events.Paste) -> None:
        hand_on(self, event)

    def validate_value(self, value: str) -> str:
        """Every value, typed, pasted or set, as the field can show it (one line)."""
        return safe_line(value)


class FieldArea(TextArea):
    """A text area whose bindings take effect in order with the characters around
    them; enter (a line break here) and its tab behaviour are its own."""

    def __init__(self, text: str = "", **options: Any) -> None:
        super().__init__(safe_text(text), **options)

    def load_text(self, text: str) -> None:
        """Replace the text, as the area can show it (its lines and tabs kept)."""
        super().load_text(safe_text(text))

    def edit(self, edit: Edit) -> EditResult:
        """Every edit (a key, a paste) with its text as the area can show it."""
        if not edit.text.isprintable():
            edit = replace(edit, text=safe_text(edit.text))
        return super().edit(edit)

    async def _on_key(self, event: events.Key) -> None:
        if hand_on(self, event) or is_text(event) or event.key == "enter":
            return
        if event.key in ("tab", "shift+tab", "escape") and self.tab_behavior == "indent":
            return  # TextArea inserts the indent, or leaves on escape, itself
        await run_at_once(self, event)

    def _on_paste(self, event: events.Paste) -> None:
        hand_on(self, event)
