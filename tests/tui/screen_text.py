"""The app's screen as plain text, for assertions (what capture-pane would show)."""

from __future__ import annotations

from textual.app import App


def screen_text(app: App) -> str:
    """Every row of the current screen, trailing spaces removed."""
    strips = app.screen._compositor.render_strips()  # noqa: SLF001 - no public text dump
    return "\n".join("".join(seg.text for seg in strip).rstrip() for strip in strips)
