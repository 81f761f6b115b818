"""The settings dialog: sampling, N, max new tokens and the splice mode.

The values belong to the session (``Loom.update_settings``; the session file keeps
them). Each field is checked before anything changes, and a bad one is named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from loomterm.tui.widgets.dialogs import DIALOG_CSS


@dataclass(frozen=True)
class Field:
    """One numeric setting: its key, label, type and the check it must pass."""

    key: str
    label: str
    kind: type
    check: Callable[[Any], bool]
    rule: str


FIELDS: tuple[Field, ...] = (
    Field("temperature", "Temperature", float, lambda v: v >= 0, ">= 0 (0 is greedy)"),
    Field("top_p", "Top-p", float, lambda v: 0 < v <= 1, "in (0, 1]"),
    Field("top_k", "Top-k", int, lambda v: v >= 0, ">= 0 (0 is off)"),
    Field("min_p", "Min-p", float, lambda v: 0 <= v < 1, "in [0, 1)"),
    Field("repetition_penalty", "Repetition penalty", float, lambda v: v > 0, "> 0 (1 is off)"),
    Field("max_new_tokens", "Max new tokens", int, lambda v: 1 <= v <= 100_000, "1 or more"),
    Field("n", "N (siblings per ctrl+n)", int, lambda v: 1 <= v <= 64, "1 to 64"),
)
SPLICE_MODES = (("fast (re-rope, approximate)", "fast"), ("exact (recompute)", "exact"))


def parse_settings(values: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Typed settings from the dialog's strings, and one message per bad field."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    for field in FIELDS:
        raw = values.get(field.key, "").strip()
        try:
            value = field.kind(raw) if field.kind is float else int(raw, 10)
        except ValueError:
            problems.append(f"{field.label}: {raw!r} is not a number")
            continue
        if not field.check(value):
            problems.append(f"{field.label} must be {field.rule}")
            continue
        out[field.key] = value
    return out, problems


class SettingsScreen(ModalScreen["dict[str, Any] | None"]):
    """Edit the session's settings; dismisses with the changed values."""

    DEFAULT_CSS = (
        "SettingsScreen {"
        + DIALOG_CSS
        + """
        & > Vertical { width: 64; }
        & .settings--row { height: 1; margin-bottom: 0; }  /* fits 80x24 */
        & .settings--row Label { width: 26; }
        & .settings--row Input, & .settings--row Select { width: 1fr; }
        & #problems { color: $error; height: auto; }
    }"""
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="settings_cancel"),
        Binding("ctrl+s", "save", "Save", id="settings_save"),
    ]

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__()
        self.settings = dict(settings)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Settings (kept with this session)", classes="dialog--title")
            for field in FIELDS:
                with Horizontal(classes="settings--row"):
                    yield Label(field.label)
                    value = self.settings.get(field.key, "")
                    yield Input(
                        f"{value:g}" if isinstance(value, float) else str(value),
                        id=f"setting-{field.key}",
                        type="number" if field.kind is float else "integer",
                        compact=True,
                    )
            with Horizontal(classes="settings--row"):
                yield Label("Splice mode")
                yield Select(
                    SPLICE_MODES,
                    value=self.settings.get("splice_mode", "fast"),
                    allow_blank=False,
                    id="setting-splice_mode",
                    compact=True,
                )
            yield Label("", id="problems")
            with Horizontal(classes="dialog--buttons"):
                yield Button("Cancel", id="cancel", compact=True)
                yield Button("Save", id="save", variant="primary", compact=True)
            yield Label("enter or ctrl+s saves · escape cancels", classes="dialog--hint")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_save()

    def action_save(self) -> None:
        values = {f.key: self.query_one(f"#setting-{f.key}", Input).value for f in FIELDS}
        parsed, problems = parse_settings(values)
        if problems:
            self.query_one("#problems", Label).update("\n".join(problems))
            return
        parsed["splice_mode"] = self.query_one("#setting-splice_mode", Select).value
        self.dismiss(parsed)

    def action_cancel(self) -> None:
        self.dismiss(None)
