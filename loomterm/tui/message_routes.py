"""The editor app's message handlers, mixed into :class:`~loomterm.tui.app.LoomApp`:
each message a job, a widget or a dialog posts goes to the controller that asked for
the work (a message may tell several, as the loom changing does). Nothing here holds
state or decides anything: what a message does is its controllers' business.

The handlers are Textual's own (``on_<namespace>_<message>``, found on the app's
class and its bases), so a subclass of the app may handle a message too and both run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loomterm.tui.controllers.context import ContextAssembled
from loomterm.tui.controllers.dialogs import Dialogs
from loomterm.tui.controllers.generation import Generation
from loomterm.tui.controllers.jobs import Jobs
from loomterm.tui.controllers.keeping import SavedElsewhere, SaveStateChanged
from loomterm.tui.controllers.lifecycle import Lifecycle
from loomterm.tui.controllers.navigation import Navigation
from loomterm.tui.controllers.progress import Progress
from loomterm.tui.controllers.sessions import Sessions
from loomterm.tui.controllers.swap import Swap
from loomterm.tui.controllers.tidy import Tidied
from loomterm.tui.controllers.typing import Typing
from loomterm.tui.controllers.weave import WeaveDone, WeaveProgress
from loomterm.tui.model_loading import StartupLoader
from loomterm.tui.widgets.branch_tree import BranchTree
from loomterm.tui.widgets.document_view import DocumentView
from loomterm.tui.widgets.export_dialog import ExportScreen

if TYPE_CHECKING:
    from loomterm.tui.controllers.alternatives import Alternatives
    from loomterm.tui.controllers.context import Context
    from loomterm.tui.controllers.failures import Failures
    from loomterm.tui.controllers.keeping import Keeping
    from loomterm.tui.controllers.models import Models
    from loomterm.tui.controllers.search import Search
    from loomterm.tui.controllers.status import StatusLine
    from loomterm.tui.controllers.think_ahead import ThinkAhead
    from loomterm.tui.controllers.tidy import Tidy
    from loomterm.tui.controllers.tree_map import TreeMapper
    from loomterm.tui.controllers.weave import Weave


class MessageRoutes:
    """The app's message handlers, each handing its message to its controllers (the
    app's, made in its ``__init__``)."""

    if TYPE_CHECKING:  # the app's controllers these handlers hand messages to
        jobs: Jobs
        progress: Progress
        failures: Failures
        ahead: ThinkAhead
        swap: Swap
        lifecycle: Lifecycle
        keeping: Keeping
        status_line: StatusLine
        tidy: Tidy
        weave: Weave
        dialogs: Dialogs
        navigation: Navigation
        generation: Generation
        models: Models
        sessions: Sessions
        context: Context
        alternatives: Alternatives
        typing: Typing
        search: Search
        tree_map: TreeMapper

    # -- the engine worker and the model's load ----------------------------------------
    def on_jobs_finished(self, message: Jobs.Finished) -> None:
        self.progress.job_finished()
        self.jobs.finished(message.label)
        self.ahead.rest()

    def on_jobs_failed(self, message: Jobs.Failed) -> None:
        self.failures.failed(message)

    def on_progress_prefill(self, message: Progress.Prefill) -> None:
        self.progress.read(message)

    def on_progress_loading(self, message: Progress.Loading) -> None:
        self.progress.loaded(message)

    def on_startup_loader_model_ready(self, message: StartupLoader.ModelReady) -> None:
        self.swap.model_ready(message.loom)

    # -- the session file ----------------------------------------------------------------
    def on_lifecycle_saved_as(self, message: Lifecycle.SavedAs) -> None:
        self.lifecycle.saved_as(message)

    def on_save_state_changed(self, _message: SaveStateChanged) -> None:
        self.status_line.soon()  # the session file failed a write, or took one again

    def on_saved_elsewhere(self, message: SavedElsewhere) -> None:
        self.keeping.saved_elsewhere(message.path)

    def on_sessions_switched(self, message: Sessions.Switched) -> None:
        self.models.session_switched()
        self.sessions.switched(message)

    def on_sessions_previewed(self, message: Sessions.Previewed) -> None:
        self.models.session_switched()
        self.sessions.previewed(message)

    # -- jobs' results ---------------------------------------------------------------------
    def on_tidied(self, message: Tidied) -> None:
        self.tidy.tidied(message)

    def on_weave_progress(self, message: WeaveProgress) -> None:
        self.weave.progressed(message)

    def on_weave_done(self, message: WeaveDone) -> None:
        self.weave.done(message)

    def on_export_screen_requested(self, message: ExportScreen.Requested) -> None:
        self.dialogs.export_requested(message.request)

    def on_dialogs_exported(self, message: Dialogs.Exported) -> None:
        self.dialogs.exported(message)

    def on_context_assembled(self, message: ContextAssembled) -> None:
        self.context.assembled(message)

    def on_navigation_moved(self, message: Navigation.Moved) -> None:
        """A job (a pick, a recompute, a chat turn) made ``message.node``: show it."""
        self.navigation.show_node(message.node)
        if message.then_generate:
            self.generation.generate_when_idle()

    # -- a generation ----------------------------------------------------------------------
    def on_generation_started(self, message: Generation.Started) -> None:
        self.models.picked(message.start, "continued")
        self.generation.started(message)

    def on_generation_streamed(self, message: Generation.Streamed) -> None:
        self.generation.streamed(message)

    def on_generation_taken_back(self, message: Generation.TakenBack) -> None:
        self.generation.taken_back(message)

    def on_generation_done(self, message: Generation.Done) -> None:
        self.generation.done(message)

    # -- the widgets and the loom ------------------------------------------------------------
    def on_document_view_token_clicked(self, event: DocumentView.TokenClicked) -> None:
        self.alternatives.clicked(event.char)

    def on_document_view_caret_moved(self, _event: DocumentView.CaretMoved) -> None:
        self.typing.caret_moved()

    def on_document_view_edited(self, event: DocumentView.Edited) -> None:
        self.typing.edited(event)

    def on_typing_synced(self, message: Typing.Synced) -> None:
        self.typing.synced(message)
        self.navigation.arrive(message.node, record=True)
        self.models.picked(message.node, "wrote after")

    def on_branch_tree_selected(self, event: BranchTree.Selected) -> None:
        self.navigation.go_to(event.chain.last)

    def on_swap_loom_changed(self, message: Swap.LoomChanged) -> None:
        self.swap.changed(message)  # the document, the branch pane, the status bar
        if message.event == "rewrite" and message.node is not None:
            self.search.forget_node_text()
        self.models.loom_changed(message)
        self.context.loom_changed(message)
        self.tree_map.changed(message.event)


__all__ = ["MessageRoutes"]
