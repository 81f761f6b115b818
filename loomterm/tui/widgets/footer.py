"""The footer: the key bindings that fit, whole, and the command palette's key at the
right edge.

Textual's footer lays every key out in a row and docks the palette's key over the
end of it, so in a narrow terminal a key was cut in the middle (``alt+▏^p palette``)
or showed through beside it. This one leaves out the keys that do not fit whole; f1
lists them all.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Footer

KEY_MARGIN = 1  # the compact footer's space after each key


def is_key(widget: Widget) -> bool:
    """A footer key (Textual's ``FooterKey``, which it does not export)."""
    return hasattr(widget, "key_display") and hasattr(widget, "description")


def key_width(key: Widget) -> int:
    """Cells a compact footer key takes: its key, then a space and its description."""
    width = Content(key.key_display).cell_length
    if key.description:
        width += 1 + Content(key.description).cell_length
    return width


class KeyFooter(Footer):
    """A compact footer that shows only the keys that fit whole."""

    _composed_width = 0

    def compose(self) -> ComposeResult:
        widgets = list(super().compose())
        # Before its first layout the footer has no size yet: it spans the screen.
        width = self._composed_width = self.size.width or self.app.size.width
        if not width:
            yield from widgets
            return
        palette = [w for w in widgets if w.has_class("-command-palette")]
        room = width - sum(key_width(p) + 1 for p in palette)  # and its border
        full = False
        for widget in widgets:
            if widget in palette or not is_key(widget):
                yield widget
                continue
            need = key_width(widget) + KEY_MARGIN
            full = full or need > room + KEY_MARGIN  # the last one needs no margin
            if not full:
                room -= need
                yield widget

    def on_resize(self) -> None:
        if self.size.width != self._composed_width:
            self.call_after_refresh(self.recompose)
