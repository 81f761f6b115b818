"""The editor pane: the current path as editable text built of token cells.

A Line API widget (a ``ScrollView`` that renders only the visible lines), so a 10,000
token document costs what its visible lines cost. The text, its tokens and the wrapped
layout live in a :class:`~loomterm.tui.document.DocumentModel`; this widget draws it
and holds the key table. What the keys, pastes and clicks do (caret moves, local edits)
is its mixin, ``document_keys``; edits go to the app, which hands them to the engine
when typing pauses. Every character is drawn through ``loomterm.tui.sanitize``, so
nothing from a model or a paste reaches the terminal raw.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from loomterm.tui.blocks import PENDING, Block
from loomterm.tui.document import DocumentModel
from loomterm.tui.sanitize import display
from loomterm.tui.shades import prob_bucket, surprisal_bucket
from loomterm.tui.widgets.document_keys import DocumentKeys
from loomterm.tui.widgets.widget_message import WidgetMessage

GUTTER = 11  # "assistant" and a bar


class DocumentView(DocumentKeys, ScrollView, can_focus=True):
    """The document: who wrote what, token boundaries, probabilities, approximations."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "cursor_left", "Left", show=False, id="cursor_left"),
        Binding("right", "cursor_right", "Right", show=False, id="cursor_right"),
        Binding("up", "cursor_up", "Up", show=False, id="cursor_up"),
        Binding("down", "cursor_down", "Down", show=False, id="cursor_down"),
        Binding("ctrl+left", "word_left", "Word left", show=False, id="word_left"),
        Binding("ctrl+right", "word_right", "Word right", show=False, id="word_right"),
        Binding("home", "line_home", "Line start", show=False, id="line_home"),
        Binding("end", "line_end", "Line end", show=False, id="line_end"),
        Binding("ctrl+home", "doc_start", "Start", show=False, id="doc_start"),
        Binding("ctrl+end", "doc_end", "End", show=False, id="doc_end"),
        Binding("pageup", "page_up", "Page up", show=False, id="page_up"),
        Binding("pagedown", "page_down", "Page down", show=False, id="page_down"),
        Binding("backspace", "backspace", "Delete left", show=False, id="backspace"),
        Binding("delete", "delete_right", "Delete right", show=False, id="delete_right"),
        # ctrl+j is a line feed: what a terminal sends for a bare LF.
        Binding("enter,ctrl+j", "newline", "New line", show=False, id="newline"),
    ]
    """
    | Key(s) | Description |
    | :- | :- |
    | arrows | Move the caret. |
    | ctrl+left/right | Move by words. |
    | home/end | Start/end of the line. |
    | ctrl+home/end | Start/end of the document. |
    | backspace/delete | Delete left/right. |
    | enter | New line. |
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "document--user",
        "document--model",
        "document--import",
        "document--pending",
        "document--special",
        "document--control",
        "document--approx",
        "document--token-a",
        "document--token-b",
        "document--prob-1",
        "document--prob-2",
        "document--prob-3",
        "document--prob-4",
        "document--prob-5",
        "document--cursor",
        "document--gutter",
        "document--role",
        "document--placeholder",
        "document--outside",
    }
    """
    | Class | Description |
    | :- | :- |
    | `document--user` | Text the user wrote. |
    | `document--model` | Text the model generated. |
    | `document--import` | Text imported from another loom. |
    | `document--pending` | Typed text the engine has not seen yet. |
    | `document--special` | Special tokens (chat markers, end of text). |
    | `document--control` | Escaped control characters. |
    | `document--approx` | Approximate (re-roped) tokens. |
    | `document--token-a/b` | Alternating token backgrounds (boundaries). |
    | `document--prob-1..5` | Probability colouring, likely to unlikely. |
    | `document--cursor` | The caret. |
    | `document--gutter`, `document--role` | The chat role gutter and its labels. |
    | `document--placeholder` | How to start, shown while the document is empty. |
    | `document--outside` | Text above the hoisted branch (outside the tree shown). |
    """

    DEFAULT_CSS = """
    DocumentView {
        background: $background;
        color: $loom-user;
        overflow-x: hidden;
        overflow-y: scroll;
        scrollbar-size-vertical: 1;
        border: none;
        & > .document--user { color: $loom-user; }
        & > .document--model { color: $loom-model; }
        & > .document--import { color: $loom-import; }
        & > .document--pending { color: $loom-pending; background: $loom-pending-background; }
        & > .document--special { color: $loom-special; text-style: italic; }
        & > .document--control { color: $loom-control; text-style: bold; }
        & > .document--approx { color: $loom-approx; text-style: italic underline; }
        & > .document--token-a { background: $loom-token-a; }
        & > .document--token-b { background: $loom-token-b; }
        & > .document--prob-1 { background: $loom-prob-1; }
        & > .document--prob-2 { background: $loom-prob-2; }
        & > .document--prob-3 { background: $loom-prob-3; }
        & > .document--prob-4 { background: $loom-prob-4; }
        & > .document--prob-5 { background: $loom-prob-5; }
        & > .document--cursor { text-style: reverse; }
        & > .document--gutter { color: $loom-muted; }
        & > .document--role { color: $loom-role; text-style: bold; }
        & > .document--placeholder { color: $loom-muted; text-style: italic; }
        & > .document--outside { color: $loom-muted; text-style: italic; }
    }
    """

    boundaries: reactive[bool] = reactive(False)
    """Show token boundaries as alternating backgrounds."""
    probabilities: reactive[bool] = reactive(False)
    """Colour every token by its probability (typed text too, once the model read it)."""
    surprisal: reactive[bool] = reactive(False)
    """Colour every token by its surprisal, -log2 p, in bits: where the text surprised
    the model. Takes precedence over ``probabilities``."""
    approx_marks: reactive[bool] = reactive(True)
    """Mark approximate (re-roped) tokens."""
    locked: reactive[bool] = reactive(False)
    """Hold edits back (while a generation is being set up, or a job whose result
    replaces the document runs); they are applied, in order, once it is False."""

    @dataclass
    class Edited(WidgetMessage["DocumentView"]):
        """The text changed here; the engine has not seen it yet. ``undoing``: the
        change is an undo or redo putting text back, which is already a step of the
        history (recording it again would cut off the redo)."""

        undoing: bool = False

    @dataclass
    class CaretMoved(WidgetMessage["DocumentView"]):
        """The caret moved (by a key or a click)."""

        caret: int

    @dataclass
    class TokenClicked(WidgetMessage["DocumentView"]):
        """A token was right-clicked, ctrl-clicked or double-clicked: show its
        alternatives."""

        char: int

    def __init__(
        self,
        document: DocumentModel,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.doc = document
        self._held: deque = deque()  # input waiting for the lock to lift (document_keys)
        self._line_cache: LRUCache[int, tuple[tuple, Strip]] = LRUCache(512)
        self._style_cache: dict[tuple, Style] = {}
        self._gutter = 0
        self._base: Style | None = None
        self._caret_line = 0
        self.follow = True  # keep the caret at the end while text streams in
        self.placeholder = ""  # one line on how to start, while the document is empty
        # node -> its writer's colour, or None (``tui.controllers.models``); then redraw().
        self.writer_colour: Callable[..., str | None] | None = None
        # Chars before this are above the hoisted branch (``tui.controllers.hoist``).
        self.outside = 0

    # -- styles --------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._style_cache.clear()
        self._line_cache.clear()
        self._base = None

    @property
    def base_style(self) -> Style:
        """The widget's own style (computing it walks the DOM: keep it)."""
        if self._base is None:
            self._base = self.rich_style
        return self._base

    def _component(self, name: str) -> Style:
        return self.get_component_rich_style(f"document--{name}", partial=True)

    def _token_style(self, block: Block, j: int) -> Style:
        node = block.node
        special = False
        bucket = 0
        approx = False
        if node is not None:
            index = block.first + j
            if index < len(node.tokens):
                special = node.tokens[index] in self.doc.special_ids
                if self.surprisal and index < len(node.logprobs):
                    bucket = surprisal_bucket(node.logprobs[index])
                elif self.probabilities and index < len(node.logprobs):
                    bucket = prob_bucket(node.logprobs[index])
            approx = self.approx_marks and node.approx
        parity = (block.pos0 + j) & 1 if self.boundaries and block.pos0 >= 0 else -1
        writer = self.writer_colour
        colour = writer(node) if writer is not None and node is not None else None
        key = (block.kind, special, bucket, parity, approx, colour)
        style = self._style_cache.get(key)
        if style is None:
            style = self.base_style + self._component(block.kind)
            if colour is not None:
                style += Style(color=colour)
            if special:
                style += self._component("special")
            if bucket:
                style += self._component(f"prob-{bucket}")
                if parity == 1:
                    style += Style(underline=True)
            elif parity >= 0:
                style += self._component("token-a" if parity == 0 else "token-b")
            if approx:
                style += self._component("approx")
            self._style_cache[key] = style
        return style

    # -- reactives -----------------------------------------------------------------
    def _watch_view(self) -> None:
        self._style_cache.clear()
        self._line_cache.clear()
        self.refresh()

    def watch_boundaries(self) -> None:
        self._watch_view()

    def watch_probabilities(self) -> None:
        self._watch_view()

    def watch_surprisal(self) -> None:
        self._watch_view()

    def watch_approx_marks(self) -> None:
        self._watch_view()

    # -- layout --------------------------------------------------------------------
    def _text_width(self) -> int:
        return max(4, self.scrollable_content_region.width - 1 - self._gutter)

    def document_changed(self, scroll: bool = True) -> None:
        """The model's text or layout changed: re-measure, redraw, follow the caret."""
        gutter = GUTTER if self.doc.has_roles else 0
        if gutter != self._gutter:
            self._gutter = gutter
            self.doc.width = 0  # force a full re-wrap at the new width
        self.doc.set_width(self._text_width())
        changed = self.doc.take_changed_from()
        if changed is not None:
            # Lines before the change kept their text, blocks and place: keep them drawn.
            first = self.doc.line_of(changed)
            for index in [i for i in self._line_cache.keys() if i >= first]:
                self._line_cache.discard(index)
        self._set_line_count(self.doc.line_count)
        if scroll:
            self.scroll_to_caret()
        self.refresh()

    def mark_outside(self, chars: int) -> None:
        """Draw the first ``chars`` characters as outside the hoisted branch (0: none)."""
        if chars != self.outside:
            self.outside = chars
            self._line_cache.clear()
            self.refresh()

    def redraw(self) -> None:
        """Draw every line again (token flags such as ``approx`` changed)."""
        self._line_cache.clear()
        self.refresh()

    def _set_line_count(self, lines: int) -> None:
        """Update the scroll range. The vertical scrollbar is always shown, so a new
        line count changes nothing in the screen's layout: skip the full relayout that
        setting ``virtual_size`` would cost (a repaint of every widget) and update the
        scrollbar in place."""
        size = Size(self.scrollable_content_region.width, lines)
        if size == self.virtual_size:
            return
        if not self.is_mounted or self.size.height == 0 or size.width != self.virtual_size.width:
            self.virtual_size = size
            return
        self.set_reactive(DocumentView.virtual_size, size)
        scrollbar = self.vertical_scrollbar
        scrollbar.window_virtual_size = lines
        scrollbar.window_size = self.scrollable_content_region.height
        scrollbar.refresh()
        self.scroll_y = self.validate_scroll_y(self.scroll_y)

    def on_resize(self, event: events.Resize) -> None:
        self.document_changed()

    def scroll_to_caret(self) -> None:
        line = self.doc.line_of(self.doc.caret)
        height = max(1, self.scrollable_content_region.height)
        top = round(self.scroll_y)
        if line < top:
            self.scroll_to(y=line, animate=False)
        elif line >= top + height:
            self.scroll_to(y=line - height + 1, animate=False)

    def caret_moved(self) -> None:
        """The caret moved without the text changing: redraw just the lines it left
        and entered (unless the view scrolled)."""
        self.follow = self.doc.caret >= self.doc.length
        top = round(self.scroll_y)
        self.scroll_to_caret()
        line = self.doc.line_of(self.doc.caret)
        if round(self.scroll_y) == top:
            for index in {self._caret_line, line}:
                self.refresh_line(index)
        else:
            self.refresh()
        self._caret_line = line
        self.post_message(self.CaretMoved(self, self.doc.caret))

    # -- rendering -----------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_y = round(self.scroll_y)
        index = scroll_y + y
        width = self.scrollable_content_region.width
        doc = self.doc
        base = self.base_style
        if index >= doc.line_count:
            return Strip.blank(width, base)
        if index == 0 and not doc.length and self.placeholder:
            return self._placeholder_line(width)
        caret_line = doc.line_of(doc.caret)
        self._caret_line = caret_line
        caret = doc.caret if index == caret_line else -1
        start = doc.starts[index]
        key = (start, doc.ends[index], caret, self.has_focus, width, start < self.outside)
        cached = self._line_cache.get(index)
        if cached is not None and cached[0] == key:
            return cached[1]
        strip = Strip(self._line_segments(index, caret)).adjust_cell_length(width, base)
        self._line_cache[index] = (key, strip)
        return strip

    def _placeholder_line(self, width: int) -> Strip:
        """The empty document: the caret, then how to start."""
        base = self.base_style
        segments = [
            Segment(" ", base),
            Segment(" ", self._cursor_style(base)),
            Segment(" " + self.placeholder, base + self._component("placeholder")),
        ]
        return Strip(segments).crop_extend(0, width, base)

    def _gutter_segment(self, start: int, end: int) -> Segment:
        marks = self.doc.role_marks
        at = bisect_left(marks, (start, ""))
        if at < len(marks) and marks[at][0] < max(end, start + 1):
            label = marks[at][1][: GUTTER - 2]
            return Segment(f"{label:>{GUTTER - 2}} ", self.base_style + self._component("role"))
        return Segment(" " * (GUTTER - 2) + "\u2502", self.base_style + self._component("gutter"))

    def _line_segments(self, index: int, caret: int) -> list[Segment]:
        doc = self.doc
        start, end = doc.starts[index], doc.ends[index]
        base = self.base_style
        segments: list[Segment] = []
        if self._gutter:
            segments.append(self._gutter_segment(start, end))
            segments.append(Segment(" ", base))
        else:
            segments.append(Segment(" ", base))
        blocks, block_starts, text = doc.blocks, doc.block_starts, doc.text
        per_token = self.boundaries or self.probabilities or self.surprisal
        special_ids = doc.special_ids
        pos = start
        at = max(0, bisect_right(block_starts, start) - 1)
        while pos < end and at < len(blocks):
            block = blocks[at]
            block_start = block_starts[at]
            block_end = block_start + block.length
            if block_end <= pos:
                at += 1
                continue
            if block.kind == PENDING:
                stop = min(block_end, end)
                self._emit(segments, text, pos, stop, base + self._component(PENDING), caret)
                pos = stop
            elif not per_token and not block.has_special(special_ids):
                # Every token of the block looks the same: one segment for the run.
                stop = min(block_end, end)
                self._emit(segments, text, pos, stop, self._token_style(block, 0), caret)
                pos = stop
            else:
                j = block.token_index(pos - block_start)
                ends = block.ends
                while j < len(ends) and pos < end:
                    stop = min(block_start + ends[j], end)
                    if stop > pos:
                        self._emit(segments, text, pos, stop, self._token_style(block, j), caret)
                        pos = stop
                    j += 1
            at += 1
        if caret == end and (end >= len(text) or text[end] == "\n" or end == start):
            segments.append(Segment(" ", self._cursor_style(base)))
        return segments

    def _cursor_style(self, style: Style) -> Style:
        cursor = self._component("cursor")
        if not self.has_focus:
            cursor += Style(dim=True)
        return style + cursor

    def _emit(
        self, out: list[Segment], text: str, start: int, stop: int, style: Style, caret: int
    ) -> None:
        """Segments for ``text[start:stop]`` in ``style``, made safe, with the caret."""
        if start <= caret < stop:
            self._emit(out, text, start, caret, style, -1)
            self._emit(out, text, caret, caret + 1, self._cursor_style(style), -1)
            self._emit(out, text, caret + 1, stop, style, -1)
            return
        if start < self.outside < stop:  # the hoist point: outside, then inside
            self._emit(out, text, start, self.outside, style, caret)
            self._emit(out, text, self.outside, stop, style, caret)
            return
        if start >= stop:
            return
        if start < self.outside:
            style = style + self._component("outside")
        chunk = text[start:stop]
        if chunk.isprintable():
            out.append(Segment(chunk, style))
            return
        control = style + self._component("control")
        run: list[str] = []
        for char in chunk:
            shown, escaped = display(char)
            if escaped:
                if run:
                    out.append(Segment("".join(run), style))
                    run = []
                out.append(Segment(shown, control))
            else:
                run.append(shown)
        if run:
            out.append(Segment("".join(run), style))
