"""Search across every branch: the dialog (ctrl+f by default), going to a hit, and the
next and previous hit (alt+n, alt+shift+n) of the last search.

The search itself (``loomterm.search``) only reads the tree and takes milliseconds, so
it runs on the UI thread; the decoded text of each node is kept between searches
(``NodeTexts``) for as long as the session is open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loomterm.search import Hit, NodeTexts, Query, SearchResult, search_tree
from loomterm.tui.widgets.search import SearchPick, SearchScreen

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.jobs import Jobs
    from loomterm.tui.controllers.navigation import Navigation


class Search:
    """Search and its hits; keeps the last search and the decoded node texts."""

    def __init__(self, app: Editor, jobs: Jobs, navigation: Navigation) -> None:
        self.app = app
        self.jobs = jobs
        self.navigation = navigation
        self.texts: NodeTexts | None = None
        self.texts_of: object = None  # the loom ``texts`` was decoded from
        self.last: SearchPick | None = None

    def run(self, query: Query) -> SearchResult:
        """``query`` over the whole tree (a bad regular expression raises InputError)."""
        loom = self.app.loom
        if self.texts is None or self.texts_of is not loom:
            self.texts = NodeTexts(loom.codec.token_bytes)
            self.texts_of = loom
        return search_tree(loom.root, query, self.texts)

    def forget_node_text(self) -> None:
        """A node's tokens changed in place (``Loom.retype``): the texts kept per node
        id and token count may be stale."""
        if self.texts is not None:
            self.texts.forget()

    def ask(self) -> None:
        """The search dialog; the hit picked there is shown."""
        app = self.app
        last = self.last.query if self.last is not None else None

        def chosen(pick: SearchPick | None) -> None:
            if pick is not None:
                self.last = pick
                self.jobs.when_idle(lambda: self.go_to_hit(pick.hits[pick.index]), stop=True)

        app.push_screen(SearchScreen(self.run, last), chosen)

    def go_to_hit(self, hit: Hit) -> None:
        """Show a path through the hit's node with the caret at the hit."""
        app = self.app
        if hit.node.id not in app.loom.tree.nodes:
            app.notify("That hit is gone (its node was merged): search again", timeout=3)
            return
        navigation = self.navigation
        navigation.show_at(navigation.leaf_below(hit.node), hit.char)

    def step(self, step: int) -> None:
        """The next (``step`` 1) or previous (-1) hit of the last search, searched again
        so that it sees the tree as it is now."""
        app = self.app
        last = self.last
        if last is None:
            self.ask()
            return
        try:
            hits = self.run(last.query).hits
        except Exception as exc:  # noqa: BLE001 - a query that worked before; say why
            app.notify(str(exc).splitlines()[0], severity="error", timeout=4)
            return
        if not hits:
            app.notify(f"No more hits for {last.query.text!r}", timeout=2)
            return
        index = (last.index + step) % len(hits)
        self.last = SearchPick(last.query, hits, index)
        app.notify(f"Hit {index + 1} of {len(hits)}", timeout=1.5)
        self.jobs.when_idle(lambda: self.go_to_hit(hits[index]), stop=True)
