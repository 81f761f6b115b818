"""What the editor says, and does, when an engine job fails: one line for the user; a
model that cannot load ends the editor (its start) or goes back to the session left
(a switch); a refused sync is not sent again as it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from loomterm.errors import LoomError, PrefillCancelled
from loomterm.sessions.opening import LoadAbandoned
from loomterm.tui.model_loading import LOAD_JOB

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.jobs import Jobs
    from loomterm.tui.controllers.lifecycle import Lifecycle
    from loomterm.tui.controllers.sessions import Sessions
    from loomterm.tui.controllers.typing import Typing


@dataclass(eq=False, repr=False)
class Failures:
    """Handles :class:`~loomterm.tui.controllers.jobs.Jobs.Failed`; ``load_error`` is
    the error the start's model load failed with (the command line says it)."""

    app: Editor
    sessions: Sessions
    typing: Typing
    lifecycle: Lifecycle

    def failed(self, message: Jobs.Failed) -> None:
        """A job raised: say why in one line (or end the editor, the model not loaded)."""
        app, error = self.app, message.error
        if isinstance(error, LoadAbandoned):
            return  # the editor quit while the model loaded: nothing to say
        if message.label == LOAD_JOB:
            if self.sessions.load_failed(error):
                return  # a session switched to: back to the one left
            # The session cannot open on this model: the command line says why, in one
            # line, as if it had failed before the editor (nothing was written).
            app.load_error = error
            app.exit(return_code=1)
            return
        if isinstance(error, PrefillCancelled):
            app.notify(
                "Stopped reading the text: your edit is kept, and the model reads the rest "
                "when it next needs it",
                timeout=5,
            )
            return
        if message.label == "sync":
            self.typing.failed = app.doc.text
        elif message.label == "save as":
            self.lifecycle.quitting = False  # the name was taken, say: the user tries again
        text = str(error) if isinstance(error, LoomError) else f"{type(error).__name__}: {error}"
        app.log.error(f"job {message.label} failed", error)
        app.notify(
            text.splitlines()[0] if text else type(error).__name__, severity="error", timeout=6
        )
