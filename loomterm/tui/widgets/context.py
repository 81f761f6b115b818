"""Memory, author's note and world info: the dialog that edits them, and the context
view that shows exactly what the model sees.

World info is edited as text, one entry per line, ``keys: text`` (keys split by
commas; a ``\\n`` in the text is a line break), which :func:`parse_world_info` reads
and the ``world_info`` setting validates. Nothing changes until every field is good;
a bad one is named in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label, Static, TextArea

from loomterm.config.settings import SettingError, Settings
from loomterm.tui.sanitize import safe_line, safe_text
from loomterm.tui.widgets.dialogs import FormScreen, dialog_css, dialog_title, form_bindings
from loomterm.tui.widgets.fields import Field, FieldArea

KIND_LABELS = {"memory": "memory", "world_info": "world info", "authors_note": "author's note"}


def world_info_text(world_info: Mapping[str, Any]) -> str:
    """The ``world_info`` setting as the dialog edits it: one ``keys: text`` per line."""
    lines = []
    for entry in world_info.get("entries", []):
        text = entry["text"].replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"{', '.join(entry['keys'])}: {text}")
    return "\n".join(lines)


def parse_world_info(text: str, scan_depth: str) -> dict[str, Any]:
    """The dialog's world info back as the setting's table; ``ValueError`` (one line)
    names the first bad line."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        keys, sep, body = line.partition(":")
        if not sep:
            raise ValueError(f"world info line {number}: write the keys, a colon, then the text")
        body = body.strip().replace("\\n", "\n").replace("\\\\", "\\")
        entries.append({"keys": keys.split(","), "text": body})
    try:
        depth = int(scan_depth.strip() or "64")
    except ValueError:
        raise ValueError(f"scan depth must be a whole number (got {scan_depth!r})") from None
    return {"scan_depth": depth, "entries": entries}


class ContextScreen(FormScreen["dict[str, Any] | None"]):
    """Edit memory, the author's note (and its depth) and world info; dismisses with
    the four settings, checked, or None."""

    SUBMIT = "save"
    SUBMIT_ON_ENTER = False  # enter in the depth field is no save (as before)

    DEFAULT_CSS = dialog_css(
        "ContextScreen",
        """
        & > Vertical { width: 96; }
        & TextArea { height: 4; }
        & #context-note { height: 3; }
        & #context-world { height: 5; }
        & .context--row { height: 1; }
        & .context--row Label { width: 30; }
        & .context--row Input { width: 12; }
        & .context--help { color: $text-muted; width: 100%; }
        & #context-problem { color: $error; height: auto; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = form_bindings("context", "Save", "context_save")

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.problem = ""  # the one-line error shown, if any

    def compose(self) -> ComposeResult:
        s = self.settings
        with Vertical():
            yield dialog_title("What the model sees besides the document")
            yield Label("Memory: before the document in every request", classes="context--help")
            yield FieldArea(s.memory, id="context-memory", soft_wrap=True)
            yield Label("Author's note: inside the document, near its end", classes="context--help")  # fmt: skip
            yield FieldArea(s.authors_note, id="context-note", soft_wrap=True)
            with Horizontal(classes="context--row"):
                yield Label("Depth (lines from the end)")
                yield Field(str(s.authors_note_depth), id="context-depth", type="integer", compact=True)  # fmt: skip
            yield Label(
                "World info: one entry per line: its keys, comma-separated, a colon, then "
                "the text (fox, the red fox: Foxes are red.)",
                classes="context--help",
                markup=False,
            )
            yield FieldArea(world_info_text(s.world_info), id="context-world", soft_wrap=True)
            with Horizontal(classes="context--row"):
                yield Label("Scan depth (tokens)")
                yield Field(str(s.world_info["scan_depth"]), id="context-scan", type="integer", compact=True)  # fmt: skip
            yield Label("", id="context-problem", markup=False)
            yield self.buttons("Save")
            yield Label("ctrl+s saves · escape cancels", classes="dialog--hint")

    def on_mount(self) -> None:
        for area in self.query(TextArea):  # typing adds to what is there, not before it
            area.move_cursor(area.document.end)
        self.query_one("#context-memory", FieldArea).focus()

    def values(self) -> dict[str, Any]:
        """The four settings as typed, checked by ``Settings.replace``; raises
        ``ValueError`` or :class:`SettingError` with one line."""
        depth = self.query_one("#context-depth", Field).value.strip()
        try:
            depth_value = int(depth or "0")
        except ValueError:
            raise ValueError(f"depth must be a whole number (got {depth!r})") from None
        values = {
            "memory": self.query_one("#context-memory", FieldArea).text,
            "authors_note": self.query_one("#context-note", FieldArea).text,
            "authors_note_depth": depth_value,
            "world_info": parse_world_info(
                self.query_one("#context-world", FieldArea).text,
                self.query_one("#context-scan", Field).value,
            ),
        }
        checked = self.settings.replace(**values)  # the same check update_settings makes
        return {name: getattr(checked, name) for name in values}

    def action_submit(self) -> None:
        try:
            values = self.values()
        except (ValueError, SettingError) as exc:
            self.problem = str(exc)
            self.query_one("#context-problem", Label).update(safe_line(self.problem))
            return
        self.dismiss(values)


@dataclass(frozen=True)
class Run:
    """A run of the sequence the model sees: its kind (path, memory...) and text."""

    kind: str
    text: str
    tokens: int


def render_context(runs: list[Run]) -> Text:
    """The runs as one text, injected ones highlighted, opened by a ``▶kind│`` mark and
    closed by ``◀`` before their final line break (the marks are the view's, not the
    model's)."""
    out = Text()
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.kind] = counts.get(run.kind, 0) + run.tokens
    total = sum(counts.values())
    parts = [f"{KIND_LABELS.get(k, 'document')} {n}" for k, n in counts.items()]
    out.append(f"What the model sees: {total} tokens ({' · '.join(parts)})\n", "bold")
    out.append("\u2500" * 40 + "\n", "dim")
    for run in runs:
        if run.kind == "path":
            out.append(safe_text(run.text))
            continue
        text = safe_text(run.text)  # document text: newlines kept, controls shown
        body = text.removesuffix("\n")  # the close mark before the line break
        out.append(f"\u25b6{KIND_LABELS.get(run.kind, run.kind)}\u2502", "bold reverse")
        out.append(body, "black on yellow" if run.kind == "authors_note" else "black on cyan")
        out.append("\u25c0", "bold reverse")
        out.append(text[len(body) :])
    return out


class ContextView(VerticalScroll):
    """Read-only: the exact sequence the model sees for the document's path."""

    DEFAULT_CSS = """
    ContextView { width: 1fr; padding: 0 1; }
    ContextView.-hidden { display: none; }
    ContextView > Static { width: 1fr; }
    """

    rendered: Text = Text()
    """What it shows now (its ``.plain`` is the text on screen)."""

    runs: tuple[Run, ...] = ()
    """The runs shown, the document's last one growing while a generation streams."""

    def compose(self) -> ComposeResult:
        yield Static("", id="context-text", markup=False)

    def show(self, runs: list[Run]) -> None:
        self.runs = tuple(runs)
        self.rendered = render_context(runs)
        self.query_one("#context-text", Static).update(self.rendered)

    def follow(self, pieces: list[str]) -> None:
        """Tokens a running generation wrote: the model reads them after everything
        shown (the context was assembled when it started), so they go at the end; the
        view stays at the bottom if it was there."""
        if not self.runs or not pieces:
            return
        at_end = self.scroll_y >= self.max_scroll_y
        text = "".join(pieces)
        *before, last = self.runs
        if last.kind == "path":
            runs = [*before, Run("path", last.text + text, last.tokens + len(pieces))]
        else:
            runs = [*self.runs, Run("path", text, len(pieces))]
        self.show(runs)
        if at_end:
            self.call_after_refresh(self.scroll_end, animate=False)

    def show_problem(self, problem: str) -> None:
        self.rendered = Text(safe_line(problem), "bold red")
        self.query_one("#context-text", Static).update(self.rendered)
