"""The weave dialog: children per node (n), depth, kept per level (k), tokens per node
and the score. The values are checked here, with one line per bad field, before the
weave starts; the engine checks them again (``engine.loom.weave.WeaveRequest.check``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Select

from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.dialogs import FormScreen, dialog_css, dialog_title, form_bindings
from loomterm.tui.widgets.fields import Field

# Kept in step with ``engine.loom.weave`` (SCORES, MAX_N, MAX_DEPTH), which the editor's
# tests check; the dialog does not import the engine (it would load torch).
SCORES: tuple[tuple[str, str], ...] = (
    ("mean log-probability", "logprob"),
    ("lowest perplexity", "perplexity"),
    ("your ratings, then log-probability", "rating"),
)
LIMITS = {"n": 64, "depth": 64, "keep": 64, "tokens": 4096}
LABELS = {
    "n": "Children per node (n)",
    "depth": "Depth (levels)",
    "keep": "Kept per level (k)",
    "tokens": "Tokens per node",
}


@dataclass(frozen=True)
class WeaveChoice:
    """What the dialog asked for."""

    n: int = 4
    depth: int = 3
    keep: int = 2
    tokens: int = 16
    score: str = "logprob"


def parse_choice(values: dict[str, str], score: str) -> tuple[WeaveChoice | None, list[str]]:
    """A choice from the dialog's strings, or None and one message per bad field."""
    numbers: dict[str, int] = {}
    problems = []
    for name, label in LABELS.items():
        text = values.get(name, "").strip()
        top = LIMITS[name]
        try:
            number = int(text)
        except ValueError:
            number = 0
        if not 1 <= number <= top:
            problems.append(f"{label} must be a whole number from 1 to {top}")
        numbers[name] = number
    if score not in dict((v, k) for k, v in SCORES):
        problems.append("Score must be one of " + ", ".join(v for _, v in SCORES))
    if problems:
        return None, problems
    return WeaveChoice(score=score, **numbers), []


class WeaveScreen(FormScreen["WeaveChoice | None"]):
    """Ask for a weave's shape; dismisses with a :class:`WeaveChoice` or None."""

    SUBMIT = "start"

    DEFAULT_CSS = dialog_css(
        "WeaveScreen",
        """
        & .weave--row { height: 1; margin-bottom: 1; }
        & .weave--row Label { width: 26; }
        & .weave--row Input, & .weave--row Select { width: 1fr; }
        & #weave-problems { color: $error; height: auto; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = form_bindings("weave", "Weave", "weave_start")

    def __init__(self, choice: WeaveChoice | None = None) -> None:
        super().__init__()
        self.choice = choice or WeaveChoice()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title("Weave from the caret")
            for name, label in LABELS.items():
                with Horizontal(classes="weave--row"):
                    yield Label(label, markup=False)
                    yield Field(
                        str(getattr(self.choice, name)),
                        id=f"weave-{name}",
                        type="integer",
                        compact=True,
                    )
            with Horizontal(classes="weave--row"):
                yield Label("Keep the best by")
                yield Select(
                    SCORES,
                    value=self.choice.score,
                    allow_blank=False,
                    id="weave-score",
                    compact=True,
                )
            yield Label("", id="weave-problems", markup=False)
            yield self.buttons("Weave")
            yield Label(
                "Each level gives every kept node n children in one batch and keeps the best "
                "k; the rest stay in the tree. enter or ctrl+s starts · escape cancels · "
                "escape during the weave stops it, keeping what it made",
                classes="dialog--hint",
            )

    def on_mount(self) -> None:
        self.query_one("#weave-n", Field).focus()

    def action_submit(self) -> None:
        values = {name: self.query_one(f"#weave-{name}", Field).value for name in LABELS}
        score = self.query_one("#weave-score", Select).value
        choice, problems = parse_choice(values, str(score))
        if choice is None:
            self.query_one("#weave-problems", Label).update("\n".join(map(safe_line, problems)))
            return
        self.dismiss(choice)
