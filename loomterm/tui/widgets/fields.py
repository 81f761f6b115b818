"""The dialogs' text fields: Textual's ``Input`` and ``TextArea`` with their keys
applied in the order they were typed (``loomterm.tui.key_order``): a key's binding runs
in the field, at once, not after it has bubbled up to the app behind the characters
typed after it; enter in a :class:`Field` reaches its dialog (a :class:`FieldForm`) at
once, so a dialog that closes on enter has closed before the next key is read; and what
reaches a field after its dialog closed goes on to what has the focus now."""

from __future__ import annotations

from textual import events
from textual.widgets import Input, TextArea

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


class FieldArea(TextArea):
    """A text area whose bindings take effect in order with the characters around
    them; enter (a line break here) and its tab behaviour are its own."""

    async def _on_key(self, event: events.Key) -> None:
        if hand_on(self, event) or is_text(event) or event.key == "enter":
            return
        if event.key in ("tab", "shift+tab", "escape") and self.tab_behavior == "indent":
            return  # TextArea inserts the indent, or leaves on escape, itself
        await run_at_once(self, event)

    def _on_paste(self, event: events.Paste) -> None:
        hand_on(self, event)
