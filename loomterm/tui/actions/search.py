"""Search across every branch: the dialog (ctrl+f by default), going to a hit, and the
next and previous hit (alt+n, alt+shift+n) of the last search.

The search itself (``loomterm.search``) only reads the tree and takes milliseconds, so
it runs on the UI thread; the decoded text of each node is kept between searches
(``NodeTexts``) for as long as the session is open.
"""

from __future__ import annotations

from loomterm.search import Hit, NodeTexts, Query, SearchResult, search_tree
from loomterm.tui.widgets.search import SearchPick, SearchScreen


class SearchActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: search and go to its hits."""

    _search_texts: NodeTexts | None = None
    _search_loom: object = None
    _search_last: SearchPick | None = None

    def run_search(self, query: Query) -> SearchResult:
        """``query`` over the whole tree (a bad regular expression raises InputError)."""
        if self._search_texts is None or self._search_loom is not self.loom:
            self._search_texts = NodeTexts(self.loom.codec.token_bytes)
            self._search_loom = self.loom
        return search_tree(self.loom.root, query, self._search_texts)

    def forget_node_text(self) -> None:
        """A node's tokens changed in place (``Loom.retype``): the texts kept per node
        id and token count may be stale."""
        if self._search_texts is not None:
            self._search_texts.forget()

    def action_search(self) -> None:
        last = self._search_last.query if self._search_last is not None else None

        def chosen(pick: SearchPick | None) -> None:
            if pick is not None:
                self._search_last = pick
                self.when_idle(lambda: self.go_to_hit(pick.hits[pick.index]), stop=True)

        self.push_screen(SearchScreen(self.run_search, last), chosen)

    def go_to_hit(self, hit: Hit) -> None:
        """Show a path through the hit's node with the caret at the hit."""
        if hit.node.id not in self.loom.tree.nodes:
            self.notify("That hit is gone (its node was merged): search again", timeout=3)
            return
        leaf = self._leaf_below(hit.node)
        self.doc.show(leaf)
        self.doc.move_to(min(hit.char, self.doc.length))
        self.view.follow = False
        self.view.document_changed()
        self._arrive(leaf)

    def action_search_step(self, step: int) -> None:
        """The next (``step`` 1) or previous (-1) hit of the last search, searched again
        so that it sees the tree as it is now."""
        last = self._search_last
        if last is None:
            self.action_search()
            return
        try:
            hits = self.run_search(last.query).hits
        except Exception as exc:  # noqa: BLE001 - a query that worked before; say why
            self.notify(str(exc).splitlines()[0], severity="error", timeout=4)
            return
        if not hits:
            self.notify(f"No more hits for {last.query.text!r}", timeout=2)
            return
        index = (last.index + step) % len(hits)
        self._search_last = SearchPick(last.query, hits, index)
        self.notify(f"Hit {index + 1} of {len(hits)}", timeout=1.5)
        self.when_idle(lambda: self.go_to_hit(hits[index]), stop=True)
