"""Unread branches: a branch the model wrote that the writer has not been to yet keeps
``meta["unread"]`` (saved with the session, as loomsidian's ``unread``) until the
document stands on it or below it; the branch pane marks such rows with a dot.

The marks go through the engine (:meth:`Jobs.set_meta`), so the session file saves
them; they are queued behind the generation that made the branch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.tree import Node, Origin
from loomterm.tui.branch_rows import is_unread

if TYPE_CHECKING:
    from loomterm.tui.controllers.jobs import Jobs

UNREAD = "unread"


@dataclass(eq=False, repr=False)
class Unread:
    """Marks new model branches unread and clears the mark where the writer goes."""

    jobs: Jobs
    # Ids marked but whose job has not run yet: a visit before it must clear them.
    pending: set[int] = field(default_factory=set, init=False)

    def added(self, node: Node) -> None:
        """A node joined the tree: the model's are unread until visited."""
        if node.origin is Origin.MODEL and not is_unread(node):
            self.pending.add(node.id)
            self.jobs.set_meta(node, **{UNREAD: True})

    def visited(self, node: Node) -> None:
        """The document stands on ``node``: it and every node above it are read."""
        for item in node.path():
            if is_unread(item) or item.id in self.pending:
                self.pending.discard(item.id)
                self.jobs.set_meta(item, **{UNREAD: None})
