"""Widgets for several models in one tree: the legend line (which colour is which
model), the attach dialog (a server URL or a local model) and the siblings dialog (which
models, how many each)."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Label

from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.dialogs import (
    FormScreen,
    NameScreen,
    dialog_css,
    dialog_title,
    form_bindings,
)
from loomterm.tui.widgets.fields import Field

SWATCH = "\u25a0"  # ■


class ModelLegend(Widget):
    """One line: a swatch and the key of every model in the tree, the active one marked;
    in blind mode, how many branches are waiting to be picked. Hidden with one model."""

    DEFAULT_CSS = """
    ModelLegend {
        height: 1;
        background: $panel;
        color: $text-muted;
        padding: 0 1;
    }
    ModelLegend.-hidden { display: none; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._text = Text()
        self.add_class("-hidden")

    def show_models(
        self,
        entries: list[tuple[str, str | None, bool, bool]],
        blind: bool,
        waiting: int,
    ) -> None:
        """``entries``: (key, colour, active, attached) per model, in table order."""
        if len(entries) < 2:
            self.add_class("-hidden")
            return
        self.remove_class("-hidden")
        text = Text("models ")
        for key, colour, active, attached in entries:
            text.append(SWATCH + " ", Style(color=colour) if colour else Style())
            label = key + (" (active)" if active else "") + ("" if attached else " (recorded)")
            text.append(label, Style(bold=active))
            text.append("  ")
        if blind:
            text.append(
                f"· blind: {waiting} branch(es) hidden until you pick one"
                if waiting
                else "· blind mode on",
                Style(italic=True),
            )
        self._text = text
        self.refresh()

    @property
    def plain(self) -> str:
        return self._text.plain

    def render(self) -> Text:
        return self._text


class AttachScreen(NameScreen):
    """Ask for a model to attach: a server URL or a local model (folder or name)."""

    MISSING = "Write a URL, a folder or a model name first"

    def __init__(self) -> None:
        super().__init__(
            "Attach a model: a server URL (http://host:port) or a local model folder or name",
            action="Attach",
        )


class SiblingsScreen(FormScreen["list[tuple[str, int]] | None"]):
    """Siblings from several models at once: a count per model (0 leaves it out)."""

    DEFAULT_CSS = dialog_css(
        "SiblingsScreen",
        """
        & .siblings--row { height: 1; margin-bottom: 1; }
        & .siblings--row Label { width: 1fr; }
        & .siblings--row Input { width: 8; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = form_bindings("siblings")

    def __init__(self, counts: list[tuple[str, int]], blind: bool) -> None:
        super().__init__()
        self.counts = counts
        self.blind = blind

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title("Siblings from several models")
            for i, (key, count) in enumerate(self.counts):
                with Horizontal(classes="siblings--row"):
                    yield Label(safe_line(key), markup=False)
                    yield Field(str(count), id=f"count-{i}", type="integer", compact=True)
            yield self.buttons("Generate")
            hint = "how many siblings each model writes · enter generates · escape cancels"
            if self.blind:
                hint += " · blind: who wrote which stays hidden until you pick one"
            yield Label(hint, classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        self.query_one("#count-0", Field).focus()

    def action_submit(self) -> None:
        plan = []
        for i, (key, _count) in enumerate(self.counts):
            value = self.query_one(f"#count-{i}", Field).value.strip() or "0"
            try:
                count = int(value)
            except ValueError:
                count = -1
            if not 0 <= count <= 64:
                self.notify(f"{key}: a count from 0 to 64, please", severity="warning")
                return
            plan.append((key, count))
        if not any(count for _key, count in plan):
            self.notify("Ask at least one model for a sibling", severity="warning")
            return
        self.dismiss(plan)
