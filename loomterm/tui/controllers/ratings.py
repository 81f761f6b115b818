"""Ratings: mark the branch at the caret good or bad (alt+g, alt+x by default; again
clears it), and filter the branch pane by them (alt+r: every branch, only good
branches, or no bad ones).

A rating is ``node.meta["rating"]`` (``loomterm.tree.rating_of``: 1 good, -1 bad) on
the first node of the branch, set through the engine so the session saves it; the
exports carry it (``json``, and ``jsonl`` preference pairs). The filter is a view
state of the branch pane only: the document, navigation and exports see every branch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from loomterm.tree import BAD, GOOD, Node, rating_of
from loomterm.tui.tree_places import branch_of

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.jobs import Jobs
    from loomterm.tui.controllers.navigation import Navigation
    from loomterm.tui.controllers.weave import Weave

FILTERS = ("all", "good", "no_bad")
FILTER_NOTES = {
    "all": "Branch pane: every branch",
    "good": "Branch pane: only branches with a good rating in them",
    "no_bad": "Branch pane: bad branches hidden",
}


def rating_filter(
    mode: str, keep: Callable[[], set[int]]
) -> Callable[[Node], Callable[[Node], bool]] | None:
    """For the branch pane's ``row_filter``: given the root, a test of which children
    to show (None: all). ``keep()``: ids always shown (the document's path), read at
    each rebuild of the pane."""
    if mode == "no_bad":

        def no_bad(root: Node) -> Callable[[Node], bool]:
            shown = keep()
            return lambda node: node.id in shown or rating_of(node) != BAD

        return no_bad
    if mode == "good":

        def build(root: Node) -> Callable[[Node], bool]:
            shown = keep()
            good: set[int] = set()
            for node in reversed(list(root.walk())):  # children before parents
                if rating_of(node) == GOOD or any(c.id in good for c in node.children):
                    good.add(node.id)
            return lambda node: node.id in shown or node.id in good

        return build
    return None


class Ratings:
    """Rating branches, and the branch pane's rating filter (``mode``)."""

    def __init__(self, app: Editor, jobs: Jobs, navigation: Navigation, weave: Weave) -> None:
        self.app = app
        self.jobs = jobs
        self.navigation = navigation
        self.weave = weave
        self.mode = "all"  # one of FILTERS

    def rate(self, value: int) -> None:
        """Rate the caret's branch ``value`` (GOOD or BAD); the same again clears it."""
        app = self.app
        node = self.navigation.caret_node() or app.doc.node
        if node is None or node.parent is None:
            app.bell()
            return
        branch = branch_of(node, show_hidden=True)
        clear = rating_of(branch) == value
        rating = None if clear else value
        # While a weave runs, the rating reaches it between two batches (the worker is
        # busy with the weave, so a job would wait for its end).
        if not self.weave.rate_while_weaving(branch, rating):
            self.jobs.set_meta(branch, rating=rating)
        word = "good" if value == GOOD else "bad"
        app.notify("Rating cleared" if clear else f"Branch rated {word}", timeout=2)

    def next_filter(self) -> None:
        """Every branch, then only good ones, then no bad ones, then every branch."""
        self.mode = FILTERS[(FILTERS.index(self.mode) + 1) % len(FILTERS)]
        app = self.app
        app.branches.row_filter = rating_filter(self.mode, lambda: {n.id for n in app.doc.path})
        app.rebuild_tree()
        app.notify(FILTER_NOTES[self.mode], timeout=2)
