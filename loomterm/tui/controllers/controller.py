"""The base of the editor's controllers: each owns one part of the editor's behaviour
(its state and its key actions) and reaches the app and the job queue through these
two fields; the rest it needs it names as fields of its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.jobs import Jobs


@dataclass(eq=False, repr=False)
class Controller:
    """A part of the editor: ``app`` (the screen, the document, the loom) and ``jobs``
    (the engine's one worker)."""

    app: Editor
    jobs: Jobs
