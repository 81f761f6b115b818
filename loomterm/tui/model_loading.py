"""The editor's start: the session is on the screen before its model is loaded.

The app starts on a :class:`~loomterm.sessions.opening.PreviewLoom` (the session file's
tree, read without torch) and its first engine job loads the model
(:meth:`~loomterm.sessions.opening.SessionOpening.finish`), its progress in the status bar.
Meanwhile:

- typing edits the document as always; its text waits, in order, for the engine (the
  load job keeps the engine busy, so the sync runs once the model is there);
- an action that needs the model (generate, settings, ...) says "model loading…" and
  is kept, in order, to run once it is ready; a view-only one (help, themes, the
  branch pane, views, quitting) runs at once.

:class:`StartupLoader` keeps that state for the app; the app calls it from
``run_action``, ``on_mount`` and its :class:`StartupLoader.ModelReady` and
``Jobs.Failed`` handlers, and ``controllers.swap`` puts the real Loom in the preview's
place (``Swap.model_ready``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

from loomterm.sessions.opening import LOADING
from loomterm.tui.keymap import ACTIONS

if TYPE_CHECKING:
    from loomterm.sessions.opening import SessionOpening
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.jobs import Jobs
    from loomterm.tui.editor_loom import EditorLoom

LOAD_JOB = "load model"
# App actions that only change the view: they need no model and run while it loads.
VIEW_ONLY = frozenset(
    {
        "help",
        "quit",
        "stop",  # nothing to stop yet: never held for later
        "toggle_tree",
        "tree_width",
        "focus_tree",
        "toggle_view",
        "change_theme",
        "toggle_hidden",
    }
)
NEEDS_MODEL = frozenset(a.action.partition("(")[0] for a in ACTIONS) - VIEW_ONLY


class StartupLoader:
    """Loads ``opening``'s model on the app's engine worker and holds back, in order,
    what needs it until it is there."""

    @dataclass
    class ModelReady(Message):
        """The model finished loading in the background: ``loom`` is the real Loom over the
        tree the editor has been showing (``loomterm.sessions.opening``)."""

        loom: EditorLoom

    def __init__(self, app: Editor, jobs: Jobs, opening: SessionOpening) -> None:
        self.app = app
        self.jobs = jobs
        self.opening = opening
        self.waiting: list[tuple[Callable[[], Any], str]] = []

    def start(self) -> None:
        """Queue the load as the engine's first job, once the user has answered for
        each server the file names that would get no key unasked (``key_consent``)."""
        from loomterm.tui.key_consent import ask_then, servers_to_ask

        app, opening = self.app, self.opening

        def job() -> None:
            # On its own thread: quitting abandons it at once (``SessionOpening``).
            loom = opening.finish_in_background(progress=app.progress.load)
            app.post_message(StartupLoader.ModelReady(loom))

        ask_then(app, servers_to_ask(opening), lambda: self.jobs.submit(LOAD_JOB, job))

    def needs_model(self, action: str) -> bool:
        """Whether the app action named ``action`` must wait for the model."""
        return action.partition("(")[0].strip() in NEEDS_MODEL

    def hold(self, run: Callable[[], Any], what: str) -> None:
        """Keep ``run`` for when the model is ready, and say so."""
        self.waiting.append((run, what))
        if [w for _run, w in self.waiting].count(what) == 1:  # once per kind of work
            self.app.notify(f"{LOADING} {what} runs when it is ready", timeout=3)

    def state(self, stage: str) -> str:
        """``model loading… load 3 s…`` for the status bar (``stage``: the loading
        progress, as ``LoomApp.loading_state`` says it), with the actions held."""
        held = f" \u00b7 {len(self.waiting)} waiting" if self.waiting else ""
        return f"{LOADING}{' ' + stage if stage else ''}{held}"

    def take_waiting(self) -> list[Callable[[], Any]]:
        """The held work, in order, now that the model is ready."""
        held, self.waiting = self.waiting, []
        return [run for run, _what in held]
