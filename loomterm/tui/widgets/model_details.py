"""The model view: every model of the tree (attached or only recorded), where it runs,
and for a server what goes to it on each request (where the API key comes from, never
the key; the config's headers, secret-looking values masked; its body fields)."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Label

from loomterm.tui.widgets.dialogs import DialogScreen, dialog_css, dialog_title


def model_lines(loom: Any) -> list[str]:
    """The view's lines for ``loom``'s models (plain text, one fact a line)."""
    lines: list[str] = []
    attached = loom.models
    for key, record in loom.model_table.items():
        runner = attached.get(key)
        state = "active" if key == loom.active_model else ("attached" if runner else "recorded")
        source = str(record.get("source") or "")
        lines.append(f"{key} ({state}): {record.get('name') or key}")
        lines.append(f"  {source}" if source else "  (no source recorded)")
        client = getattr(runner, "client", None)
        credentials = getattr(client, "credentials", None)
        if credentials is not None:
            kind = getattr(getattr(runner, "info", None), "kind", None) or record.get("kind")
            lines.append(f"  server: {kind or 'unknown kind'}")
            lines += [f"  {line}" for line in credentials.describe()]
    return lines or ["no model yet"]


class ModelDetailsScreen(DialogScreen[None]):
    """The model view (read only): escape closes it."""

    DEFAULT_CSS = dialog_css(
        "ModelDetailsScreen",
        """
        & > Vertical { width: 96%; max-width: 110; max-height: 90%; }
        & VerticalScroll { height: auto; max-height: 30; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,enter", "close", "Close", id="model_details_close"),
    ]

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title("Models")
            with VerticalScroll():
                yield Label("\n".join(self.lines), id="model-lines", markup=False)
            yield Label(
                "escape closes \u00b7 a server's headers and body fields: config.toml",
                classes="dialog--hint",
                markup=False,
            )

    def action_close(self) -> None:
        self.dismiss(None)
