"""The token alternatives popup: the model's top-10 for one position, with
probabilities. Picking one makes a branch with that token (no forward pass)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.dialogs import DialogScreen, dialog_css, dialog_title

BAR = 12


@dataclass(frozen=True)
class Alternative:
    """One row: a token, its text, its log-probability, whether it is the one chosen."""

    token_id: int
    piece: str
    logprob: float
    chosen: bool = False

    @property
    def probability(self) -> float:
        return math.exp(self.logprob) if self.logprob > -1e30 else 0.0


@dataclass(frozen=True)
class Pick:
    """The popup's answer: a token, and whether to go on generating after it."""

    token_id: int
    generate: bool


def shown_piece(piece: str) -> str:
    """A token's text made visible: quotes mark its ends, spaces show as ``·``."""
    return "\u2039" + safe_line(piece).replace(" ", "\u00b7") + "\u203a"


def chosen_summary(rows: list[Alternative], logprob: float | None) -> str:
    """The chosen token's probability and its rank among the alternatives:
    ``12.30%, rank 2 of 10`` (``rank >10`` when it was not among them)."""
    if logprob is None:
        chosen = next((row for row in rows if row.chosen), None)
        logprob = chosen.logprob if chosen is not None else None
    if logprob is None:
        return "probability not recorded"
    probability = math.exp(logprob) if logprob > -1e30 else 0.0
    if any(row.chosen for row in rows):
        rank = 1 + sum(1 for row in rows if not row.chosen and row.logprob > logprob)
        where = f"rank {rank} of {len(rows)}"
    else:
        where = f"rank >{len(rows)}"
    return f"{probability:.2%}, {where}"


class AlternativesScreen(DialogScreen["Pick | None"]):
    """Pick an alternative token. Enter picks; ctrl+g picks and generates."""

    DEFAULT_CSS = dialog_css(
        "AlternativesScreen",
        """
        & > Vertical { width: 60; }
        & OptionList { height: auto; max-height: 14; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", id="alternatives_close"),
        Binding("ctrl+g", "pick(True)", "Pick and generate", id="alternatives_generate"),
    ]

    def __init__(self, title: str, rows: list[Alternative]) -> None:
        super().__init__()
        self.title_text = title
        self.rows = rows

    def compose(self) -> ComposeResult:
        options = []
        for row in self.rows:
            filled = round(row.probability * BAR)
            text = Text.assemble(
                (f"{row.probability:7.2%} ", "bold" if row.chosen else ""),
                ("\u2588" * filled + "\u2591" * (BAR - filled), "dim"),
                " ",
                shown_piece(row.piece),
                ("  \u2190 chosen" if row.chosen else "", "italic"),
            )
            options.append(Option(text, id=str(row.token_id)))
        with Vertical():
            yield dialog_title(self.title_text)
            yield OptionList(*options, markup=False)
            yield Label(
                "enter: branch · ^g: branch and generate · esc: close",
                classes="dialog--hint",
            )

    def on_mount(self) -> None:
        option_list = self.query_one(OptionList)
        option_list.focus()
        chosen = next((i for i, row in enumerate(self.rows) if row.chosen), 0)
        option_list.highlighted = chosen

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(Pick(int(event.option.id or 0), False))

    def action_pick(self, generate: bool) -> None:
        option_list = self.query_one(OptionList)
        if option_list.highlighted is None:
            return
        option = option_list.get_option_at_index(option_list.highlighted)
        self.dismiss(Pick(int(option.id or 0), generate))

    def action_close(self) -> None:
        self.dismiss(None)
