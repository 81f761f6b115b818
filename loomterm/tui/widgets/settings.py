"""The settings dialog: sampling, N, max new tokens and the splice mode.

The values belong to the session (``Loom.update_settings``; the session file keeps
them). The rows come from :class:`loomterm.config.settings.Settings`' table (every setting
declared with ``dialog=True``, in its order), and each value is checked there, by
``parse`` and ``Settings.replace``, before anything changes: a bad one is named with
the rule it breaks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, Select

from loomterm.config.settings import SettingError, Settings, Spec
from loomterm.tui.sanitize import plain, safe_line
from loomterm.tui.widgets.dialogs import FormScreen, dialog_css, dialog_title, form_bindings
from loomterm.tui.widgets.fields import Field

# Rows of the dialog: typed into an input, or chosen from a list (choices, on/off).
DIALOG: tuple[Spec, ...] = tuple(spec for spec in Settings.SPECS.values() if spec.dialog)
FIELDS: tuple[Spec, ...] = tuple(s for s in DIALOG if s.choices is None and s.kind is not bool)
CHOICES: tuple[Spec, ...] = tuple(s for s in DIALOG if s not in FIELDS)
# How a choice reads in its list, where the bare value says too little.
CHOICE_LABELS: dict[tuple[str, Any], str] = {
    ("splice_mode", "fast"): "fast (re-rope, approx.)",
    ("splice_mode", "exact"): "exact (recompute)",
}
_INPUT_TYPES = {float: "number", int: "integer"}
# A setting that needs a runner capability, and the value in force without it.
NEEDS: dict[str, tuple[str, Any]] = {
    "splice_mode": ("rerope", "exact"),
    "token_healing": ("healing", "off"),
}


def options(spec: Spec) -> list[tuple[str, Any]]:
    """(label, value) rows of a choice's list."""
    values = spec.choices if spec.choices is not None else (True, False)
    return [(CHOICE_LABELS.get((spec.name, v), spec.text(v)), v) for v in values]


def unavailable_settings(capabilities: Any) -> dict[str, str]:
    """Settings a runner with ``capabilities`` cannot honour, each with the reason
    (the runner's own ``why_not`` line)."""
    out = {}
    for name, (capability, _) in NEEDS.items():
        if not getattr(capabilities, capability):
            out[name] = capabilities.reason(capability) or f"this model has no {capability}"
    return out


def problem(spec: Spec, error: SettingError) -> str:
    """The one-line error, naming the setting as the dialog does: ``Top-p must be ...``."""
    return f"{spec.label} {error.problem}"


def parse_settings(values: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Typed settings from the dialog's strings, and one message per bad field."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    for spec in FIELDS:
        try:
            out[spec.name] = spec.parse(values.get(spec.name, ""))
        except SettingError as exc:
            problems.append(problem(spec, exc))
    return out, problems


class SettingInput(Field):
    """A setting's field: a number field says which characters it refused (Textual's
    own only rings the bell, and a letter typed into it was lost without a word)."""

    @dataclass
    class Refused(Message):
        """``text`` was typed into ``field`` and refused by its type."""

        field: SettingInput
        text: str

    _attempt = ""

    def replace(self, text: str, start: int, end: int) -> None:
        self._attempt = text
        super().replace(text, start, end)

    def restricted(self) -> None:
        super().restricted()
        self.post_message(self.Refused(self, self._attempt))


def refusal(spec: Spec, text: str) -> str:
    """``Temperature takes a number: 'x' was not typed``."""
    what = "a whole number" if spec.kind is int else "a number"
    return f"{spec.label} takes {what}: {text!r} was not typed"


class SettingsScreen(FormScreen["dict[str, Any] | None"]):
    """Edit the session's settings; dismisses with the changed values."""

    SUBMIT = "save"

    DEFAULT_CSS = dialog_css(
        "SettingsScreen",
        """
        & > Vertical { width: 92; }
        & #settings-rows { height: 1fr; scrollbar-size-vertical: 1; }
        & .settings--row { height: 1; margin-bottom: 1; }
        & .settings--row Label { width: 26; }
        & .settings--row Input, & .settings--row Select { width: 1fr; }
        & .settings--row .settings--source { width: 30; padding-left: 1; color: $loom-muted; }
        & .settings--why { color: $loom-muted; margin: -1 0 1 0; width: 1fr; }
        & #problems { color: $error; height: auto; }
        /* A narrow terminal: each label above its field, the field the dialog's width
           (side by side, the value fields were squeezed out: "Temperature   cre"). */
        &.-narrow .settings--row { layout: vertical; height: 2; }
        &.-narrow .settings--row Label { width: 100%; }
        &.-narrow .settings--row .settings--source { display: none; }
        /* A short terminal: the rows get the room (the keys are on the buttons). */
        &.-short > Vertical { padding: 0 2; }
        &.-short .dialog--title, &.-short .settings--row { margin-bottom: 0; }
        &.-short .dialog--buttons { margin-top: 0; }
        &.-short .dialog--hint { display: none; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = form_bindings("settings", "Save", "settings_save")

    def __init__(
        self,
        settings: Settings | Mapping[str, Any],
        sources: Mapping[str, str] | None = None,
        unavailable: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        # Settings this model cannot honour, with the reason: shown greyed out at the
        # value in force, and left as they were on save (another model may honour them).
        self.unavailable = dict(unavailable or {})
        # Where each sampler's value came from (loomterm.sessions.defaults), shown beside it.
        self.sources = dict(sources or {})
        # A Settings; an engine that still keeps a dict is read through from_stored.
        self.settings: Settings = Settings.from_stored(settings)[0]
        self.refused = False  # the problems line says what a number field refused

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title("Settings (kept with this session)")
            with VerticalScroll(id="settings-rows", can_focus=False):
                yield from self._rows()
            yield Label("", id="problems", markup=False)
            yield self.buttons("Save")
            yield Label("enter or ctrl+s saves · escape cancels", classes="dialog--hint")

    def _rows(self) -> ComposeResult:
        """One row per setting: its label, and an input or a list."""
        for spec in DIALOG:
            with Horizontal(classes="settings--row"):
                label = Label(spec.label, markup=False)
                label.tooltip = spec.help
                yield label
                value = getattr(self.settings, spec.name)
                if spec in FIELDS:
                    widget: Input | Select = SettingInput(
                        spec.text(value),
                        id=f"setting-{spec.name}",
                        type=_INPUT_TYPES.get(spec.kind, "text"),
                        compact=True,
                    )
                else:
                    reason = self.unavailable.get(spec.name)
                    widget = Select(
                        options(spec),
                        value=NEEDS[spec.name][1] if reason and spec.name in NEEDS else value,
                        allow_blank=False,
                        id=f"setting-{spec.name}",
                        compact=True,
                        disabled=bool(reason),
                    )
                widget.tooltip = plain(self.unavailable.get(spec.name) or spec.help)
                yield widget
                if spec.name in self.unavailable:
                    yield Label("unavailable here", classes="settings--source")
                elif self.sources:
                    yield Label(
                        self.sources.get(spec.name, ""), classes="settings--source", markup=False
                    )
            if spec.name in self.unavailable:
                yield Label(
                    f"{spec.label} is greyed out: {self.unavailable[spec.name]}",
                    classes="settings--why",
                    markup=False,
                )

    NARROW = 72  # columns below which each label goes above its field
    SHORT = 20  # rows below which the dialog drops its spacing and hint

    def on_resize(self) -> None:
        self.set_class(self.size.width < self.NARROW, "-narrow")
        self.set_class(self.size.height < self.SHORT, "-short")

    def on_setting_input_refused(self, event: SettingInput.Refused) -> None:
        spec = Settings.spec(str(event.field.id).removeprefix("setting-"))
        self.refused = True
        self.query_one("#problems", Label).update(safe_line(refusal(spec, event.text)))

    def on_input_changed(self, event: Input.Changed) -> None:
        if self.refused:  # typing that was taken: the refusal is old news
            self.refused = False
            self.query_one("#problems", Label).update("")

    def action_submit(self) -> None:
        values = {s.name: self.query_one(f"#setting-{s.name}", Field).value for s in FIELDS}
        parsed, problems = parse_settings(values)
        for spec in CHOICES:
            if spec.name not in self.unavailable:
                parsed[spec.name] = self.query_one(f"#setting-{spec.name}", Select).value
        if not problems:
            try:
                self.settings.replace(**parsed)  # the same check update_settings makes
            except SettingError as exc:
                problems.append(problem(Settings.spec(exc.setting), exc))
        if problems:
            self.refused = False
            self.query_one("#problems", Label).update("\n".join(map(safe_line, problems)))
            return
        # Only what changed: the app says "saved" only when something was.
        self.dismiss({k: v for k, v in parsed.items() if getattr(self.settings, k) != v})
