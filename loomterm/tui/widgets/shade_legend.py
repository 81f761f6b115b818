"""The shade legend: one line under the document while tokens are coloured (f9's
surprisal view, f6's probabilities), saying which view is on, what each colour means
and the key that turns it off."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from loomterm.tui.shades import PROBABILITY_LABELS, SURPRISAL_LABELS
from loomterm.tui.widgets.status_bar import LINE_BAR_CSS


class ShadeLegend(Widget):
    """Hidden unless the document colours tokens; then the colours' key."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {f"shade-legend--{i}" for i in range(1, 6)}
    DEFAULT_CSS = (
        "ShadeLegend {"
        + LINE_BAR_CSS
        + """}
    ShadeLegend.-hidden { display: none; }
    ShadeLegend > .shade-legend--1 { background: $loom-prob-1; color: $text; }
    ShadeLegend > .shade-legend--2 { background: $loom-prob-2; color: $text; }
    ShadeLegend > .shade-legend--3 { background: $loom-prob-3; color: $text; }
    ShadeLegend > .shade-legend--4 { background: $loom-prob-4; color: $text; }
    ShadeLegend > .shade-legend--5 { background: $loom-prob-5; color: $text; }
    """
    )

    view = ""
    """``surprisal``, ``probabilities`` or "" (hidden)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="-hidden")

    def show_view(self, surprisal: bool, probabilities: bool) -> None:
        """Show the key of the colouring in force (surprisal wins, as in the document)."""
        self.view = "surprisal" if surprisal else "probabilities" if probabilities else ""
        self.set_class(not self.view, "-hidden")
        self.refresh()

    @property
    def text(self) -> str:
        """The line as shown (empty when hidden)."""
        return self.render().plain if self.view else ""

    def render(self) -> RenderResult:
        if self.view == "surprisal":
            title, labels, key = "surprisal view on", SURPRISAL_LABELS, "f9"
        elif self.view == "probabilities":
            title, labels, key = "probability colours on", PROBABILITY_LABELS, "f6"
        else:
            return Text()
        out = Text(title, style="bold")
        out.append(f" ({key} turns it off):")
        for index, label in enumerate(labels, 1):
            out.append(" ")
            out.append(f" {label} ", self.get_component_rich_style(f"shade-legend--{index}"))
        return out
