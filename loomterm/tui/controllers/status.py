"""The status bar and the window title: what the editor is doing, on which model, and
which session is open."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.tui.controllers.controller import Controller
from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.status_bar import StatusBar, StatusInfo, backend_name

if TYPE_CHECKING:
    from textual.timer import Timer

    from loomterm.tui.controllers.caret import Caret
    from loomterm.tui.controllers.generation import Generation
    from loomterm.tui.controllers.keeping import Keeping
    from loomterm.tui.controllers.navigation import Navigation
    from loomterm.tui.controllers.presets import Presets
    from loomterm.tui.controllers.progress import Progress
    from loomterm.tui.controllers.weave import Weave

TITLE = "loomterm"
TITLE_PUSH = "\x1b[22;2t"  # xterm: save the window title (terminals without it ignore it)
TITLE_POP = "\x1b[23;2t"  # and give it back
STATUS_DELAY = 0.1  # seconds: many things change the status bar at once


@dataclass(eq=False, repr=False)
class StatusLine(Controller):
    """Keeps the status bar (``bar``) and the terminal's title up to date."""

    progress: Progress
    generation: Generation
    weave: Weave
    presets: Presets
    navigation: Navigation
    keeping: Keeping
    caret: Caret
    bar: StatusBar = field(default_factory=lambda: StatusBar(id="status"), init=False)
    timer: Timer | None = field(default=None, init=False)
    # the terminal's own title, pushed before the first one
    title_saved: bool = field(default=False, init=False)

    def soon(self) -> None:
        """Refresh the status bar shortly (many things change it at once)."""
        if self.timer is None:
            self.timer = self.app.set_timer(STATUS_DELAY, self.refresh)

    def refresh(self) -> None:
        """Refresh the status bar now."""
        self.timer = None
        self.caret.soon()  # the session hears the caret once it rests
        app, progress = self.app, self.progress
        loom = app.loom
        state = ""
        if app.loader is not None:
            state = app.loader.state(progress.loading_state())
        elif progress.prefill is not None:
            state = progress.prefill_state()
        elif progress.loading is not None:
            state = progress.loading_state()
        elif app.generating:
            state = self.weave.state() or self.generation.state()
        elif self.jobs.in_flight:
            state = app.ahead.state() or "working\u2026"
        elif app.doc.dirty:
            state = "edited"
        else:
            state = app.ahead.state(idle=True)
        # Safe while the worker generates: Loom.kv_bytes reads a snapshot of the nodes.
        # It gives the bytes, or a breakdown (.nodes, .working, .total): KV shows the total.
        memory = loom.kv_bytes()
        backend = (
            "" if app.loader is not None else backend_name(loom.model_table.get(loom.active_model))
        )
        info = StatusInfo(
            model=loom.runner.name,
            device=loom.runner.where,
            backend=backend,
            path_tokens=app.doc.shown_tokens,
            nodes=len(loom.tree.nodes) - 1,
            kv_bytes=memory.total,
            tokens_per_second=self.generation.tokens_per_second if app.show_speed else None,
            settings=loom.settings,
            preset=self.presets.label() if loom.settings.preset else "",
            state=state,
            read_only=app.lifecycle.read_only,
            unsaved=app.lifecycle.unsaved,
            place=self.navigation.caret_place(),
            saving=self.keeping.saving(),
        )
        self.bar.show_status(info)

    def show_title(self) -> None:
        """The window title: the session's name, and whether it is read-only (the
        terminal's title is saved first and given back on quit)."""
        app = self.app
        title = TITLE
        if app.session_name:
            title += f" \u2014 {app.session_name}"
        if app.lifecycle.read_only:
            title += " (read-only)"
        first = app.title == TITLE
        app.title = title
        if first:
            app.write_terminal(TITLE_PUSH)
        app.write_terminal(f"\x1b]2;{safe_line(title)}\x07")
