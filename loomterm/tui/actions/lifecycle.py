"""The editor's life around the work: prefill progress in the status bar (escape stops
the reading), model loading progress while a session opens, read-only sessions (a change is kept in memory and offered as a new
session on quit), and quitting.
"""

from __future__ import annotations

import time

from loomterm.tui import sessions
from loomterm.tui.messages import Loading, Prefill, SavedAs


class LifecycleActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: prefill progress, read-only
    sessions and quitting."""

    # -- prefill progress --------------------------------------------------------------
    def _on_progress(self, stage: str, done: int, total: int | None) -> None:
        """Runner and model-loading progress, on the worker thread: to the UI as a
        message."""
        if stage == "prefill":
            self.post_message(Prefill(done, total))
        else:
            self.post_message(Loading(stage, done, total))

    def on_loading(self, message: Loading) -> None:
        finished = message.total is not None and message.done >= message.total
        self._loading = None if finished else (message.stage, message.done, message.total)
        self._refresh_status_soon()

    def loading_state(self) -> str:
        """``loading g: load 12/30`` or, for a stage of unknown length, its seconds."""
        if self._loading is None:
            return ""
        stage, done, total = self._loading
        amount = f"{done:,}/{total:,}" if total else f"{done} s"
        return f"{stage} {amount}\u2026"

    def on_prefill(self, message: Prefill) -> None:
        previous = self._prefill
        if message.done >= message.total:
            # The read is over (a server reports 12/12 as it starts streaming): from
            # here the status bar shows the generation and its rate, not the read.
            self._prefill = None
            if previous is not None:
                self.refresh_bindings()
            self._refresh_status_soon()
            return
        if previous is None or message.done < previous[0] or message.total != previous[1]:
            self._prefill = (message.done, message.total, message.done, time.monotonic())
            self.refresh_bindings()  # escape now stops the reading
        else:
            self._prefill = (message.done, message.total, previous[2], previous[3])
        self._refresh_status_soon()

    def prefill_state(self) -> str:
        """``reading 4,096/16,000 tokens · 812 tok/s · esc stops`` while reading."""
        if self._prefill is None:
            return ""
        done, total, first, since = self._prefill
        text = f"reading {done:,}/{total:,} tokens"
        seconds = time.monotonic() - since
        if done > first and seconds > 0:
            text += f" \u00b7 {(done - first) / seconds:,.0f} tok/s"
        return text + " \u00b7 esc stops"

    # -- read-only sessions ---------------------------------------------------------
    def _note_change(self) -> None:
        """The session changed: in a read-only one, say once that nothing is saved."""
        if self.read_only and not self.unsaved:
            self.unsaved = True
            self.notify(
                "Read-only session: changes stay in memory; quitting offers to save them "
                "as a new session",
                severity="warning",
                timeout=6,
            )
            self._refresh_status_soon()

    def _offer_save_as(self) -> None:
        """Quitting a changed read-only session: save as a new one, drop, or stay."""
        from loomterm.tui.widgets.dialogs import SaveAsScreen

        name = self.session_name or "session"
        default = sessions.free_name(f"{name}-copy")

        def answered(choice: str | None) -> None:
            if choice is None:
                self._quitting = False
                return
            if not choice:
                self._finish(ask=False)
                return
            loom = self.loom

            def job() -> None:
                sessions.save_as(loom, choice)
                self.post_message(SavedAs(choice))

            self.submit("save as", job)

        self.push_screen(SaveAsScreen(name, default), answered)

    def on_saved_as(self, message: SavedAs) -> None:
        self.read_only = False
        self.unsaved = False
        self.session_name = message.name
        self.show_title()
        self._refresh_status()
        if self._quitting:
            self.when_idle(self._finish)
        else:
            self.notify(f"Saved as session {message.name!r}", timeout=4)

    # -- quitting ----------------------------------------------------------------------
    async def action_quit(self) -> None:
        """Stop generating, hand the last typing to the engine, then leave (a changed
        read-only session first asks whether to save the changes as a new one)."""
        if self._quitting:
            return
        self._quitting = True
        self._cancel.set()
        # ctrl+q is a priority binding: it runs before keys typed just ahead of it have
        # reached the document. Those are applied first, then the engine gets the text.
        self.view.after_input(lambda: self.when_idle(self._finish))

    def _finish(self, ask: bool = True) -> None:
        if ask and self.read_only and self.unsaved:
            self._offer_save_as()
            return
        self._jobs.put(None)
        self.exit()
