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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.tree import BAD, GOOD, Node, rating_of
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.tree_places import branch_of

if TYPE_CHECKING:
    from loomterm.tui.controllers.navigation import Navigation
    from loomterm.tui.controllers.weave import Weave

FILTERS = ("all", "good", "no_bad")
FILTER_NOTES = {
    "all": "Branch pane: every branch",
    "good": "Branch pane: only branches with a good rating in them",
    "no_bad": "Branch pane: bad branches hidden",
}


@dataclass(frozen=True)
class RatingRows:
    """The branch pane's rows under a rating filter: those that pass it, and the
    document's path, which always stays (a row the filter leaves out but the caret is
    on says so)."""

    passes: Callable[[Node], bool]
    shown: frozenset[int]
    why: str

    def __call__(self, node: Node) -> bool:
        return node.id in self.shown or self.passes(node)

    def why_shown(self, node: Node) -> str:
        return self.why if node.id in self.shown and not self.passes(node) else ""


KEPT_NOTE = "you are here"  # why a row the filter leaves out is shown all the same


def rating_filter(mode: str, keep: Callable[[], set[int]]) -> Callable[[Node], RatingRows] | None:
    """For the branch pane's ``row_filter``: given the root, which children to show
    (None: all). ``keep()``: ids always shown (the document's path), read at each
    rebuild of the pane."""
    if mode == "no_bad":

        def no_bad(root: Node) -> RatingRows:
            return RatingRows(lambda node: rating_of(node) != BAD, frozenset(keep()), KEPT_NOTE)

        return no_bad
    if mode == "good":

        def build(root: Node) -> RatingRows:
            good: set[int] = set()
            for node in reversed(list(root.walk())):  # children before parents
                if rating_of(node) == GOOD or any(c.id in good for c in node.children):
                    good.add(node.id)
            return RatingRows(lambda node: node.id in good, frozenset(keep()), KEPT_NOTE)

        return build
    return None


@dataclass(eq=False, repr=False)
class Ratings(Controller):
    """Rating branches, and the branch pane's rating filter (``mode``)."""

    navigation: Navigation
    weave: Weave
    mode: str = field(default="all", init=False)  # one of FILTERS

    @key_action()
    def rate(self, value: int) -> None:
        """Rate the caret's branch ``value`` (GOOD or BAD); the same again clears it."""
        app = self.app
        node = self.navigation.node_at_caret()
        if node is None:
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

    @key_action("rating_filter")
    def next_filter(self) -> None:
        """Every branch, then only good ones, then no bad ones, then every branch."""
        self.mode = FILTERS[(FILTERS.index(self.mode) + 1) % len(FILTERS)]
        app = self.app
        app.branches.row_filter = rating_filter(self.mode, lambda: {n.id for n in app.doc.path})
        app.panes.rebuild_tree()
        note = FILTER_NOTES[self.mode]
        rows = app.branches.row_filter
        if rows is not None:
            test = rows(app.loom.root)
            if any(test.why_shown(node) for node in app.doc.path if node.parent is not None):
                note += '; the branch you are on stays shown, marked "(you are here)"'
        app.notify(note, timeout=4)
