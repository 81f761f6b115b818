"""Search across every branch: the dialog (ctrl+f by default), going to a hit, and the
next and previous hit (alt+n, alt+shift+n) of the last search.

The search itself (``loomterm.search``) only reads the tree and usually takes
milliseconds, but a huge tree or a pattern only a backtracking engine can run may take
longer: it runs on a thread of its own, its result comes back to the UI thread, and a
newer search stops an older one between nodes (every key answers meanwhile). It ends at
its deadline with one line. The decoded text of each node is kept between searches
(``NodeTexts``) for as long as the session is open.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.errors import InputError
from loomterm.search import DEADLINE_S, Hit, NodeTexts, Query, SearchResult, search_tree
from loomterm.search.pattern import PatternTooSlow, SearchStopped
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.widgets.search import SearchPick, SearchScreen

if TYPE_CHECKING:
    from loomterm.tui.controllers.navigation import Navigation


@dataclass(eq=False, repr=False)
class Search(Controller):
    """Search and its hits; keeps the last search and the decoded node texts."""

    navigation: Navigation
    texts: NodeTexts | None = field(default=None, init=False)
    texts_of: object = field(default=None, init=False)  # the loom ``texts`` was decoded from
    last: SearchPick | None = field(default=None, init=False)
    # the newest search; an older one stops between nodes
    serial: int = field(default=0, init=False)
    running: int = field(default=0, init=False)  # searches whose result has not come back yet
    deadline_s: float = field(default=DEADLINE_S, init=False)

    def start(self, query: Query, done: Callable[[SearchResult | InputError], None]) -> None:
        """Search ``query`` over the whole tree on a thread; ``done`` gets the result or
        the one-line error on the UI thread, unless a newer search started meanwhile."""
        loom, texts = self.app.loom, self._texts()
        self.serial += 1
        serial, app = self.serial, self.app
        deadline = time.monotonic() + self.deadline_s

        def stopped() -> bool:
            return self.serial != serial

        def deliver(outcome: SearchResult | InputError | None) -> None:
            self.running -= 1
            if outcome is not None and not stopped():
                done(outcome)

        def work() -> None:
            outcome: SearchResult | InputError | None = None  # None: stopped
            try:
                outcome = search_tree(loom.root, query, texts, stopped=stopped, deadline=deadline)
            except SearchStopped:
                pass
            except InputError as exc:
                outcome = exc
            except Exception as exc:  # noqa: BLE001 - the tree changed under it: say so, once
                outcome = InputError(f"search failed ({type(exc).__name__}): search again")
            try:
                app.call_from_thread(deliver, outcome)
            except RuntimeError:  # the editor closed meanwhile
                pass

        self.running += 1
        threading.Thread(target=work, daemon=True, name="loomterm-search").start()

    def run_now(self, query: Query, budget_s: float) -> SearchResult | InputError | None:
        """``query`` searched here, on the UI thread, if it takes under ``budget_s``
        (RE2 over a tree of hundreds of nodes: milliseconds); None when it needs longer
        (then :meth:`start` it). Enter typed with the query uses it, so that the keys
        typed after enter land where the hit is, in order."""
        self.serial += 1  # a search still running is of no use now
        loom = self.app.loom
        try:
            return search_tree(
                loom.root, query, self._texts(), deadline=time.monotonic() + budget_s
            )
        except PatternTooSlow:
            return None
        except InputError as exc:
            return exc

    def _texts(self) -> NodeTexts:
        loom = self.app.loom
        if self.texts is None or self.texts_of is not loom:
            self.texts = NodeTexts(loom.codec.token_bytes)
            self.texts_of = loom
        return self.texts

    @property
    def busy(self) -> bool:
        """A search is running (its result, or its stop, has not come back)."""
        return self.running > 0

    def stop(self) -> None:
        """Stop the running search (its dialog closed)."""
        self.serial += 1

    def forget_node_text(self) -> None:
        """A node's tokens changed in place (``Loom.retype``): the texts kept per node
        id and token count may be stale."""
        if self.texts is not None:
            self.texts.forget()

    @key_action("search")
    def ask(self) -> None:
        """The search dialog; the hit picked there is shown."""
        app = self.app
        last = self.last.query if self.last is not None else None

        def chosen(pick: SearchPick | None) -> None:
            if pick is not None:
                self.last = pick
                self.jobs.when_idle(lambda: self.go_to_hit(pick.hits[pick.index]), stop=True)

        app.push_screen(SearchScreen(self, last), chosen)

    def go_to_hit(self, hit: Hit) -> None:
        """Show a path through the hit's node with the caret at the hit."""
        app = self.app
        if hit.node.id not in app.loom.tree.nodes:
            app.notify("That hit is gone (its node was merged): search again", timeout=3)
            return
        navigation = self.navigation
        navigation.show_at(navigation.leaf_below(hit.node), hit.char)

    @key_action("search_step")
    def step(self, step: int) -> None:
        """The next (``step`` 1) or previous (-1) hit of the last search, searched again
        so that it sees the tree as it is now."""
        app = self.app
        last = self.last
        if last is None:
            self.ask()
            return

        def found(outcome: SearchResult | InputError) -> None:
            if isinstance(outcome, InputError):  # a query that worked before; say why
                app.notify(str(outcome), severity="error", timeout=4)
                return
            self._step_to(last, outcome.hits, step)

        self.start(last.query, found)

    def _step_to(self, last: SearchPick, hits: list[Hit], step: int) -> None:
        app = self.app
        if not hits:
            app.notify(f"No more hits for {last.query.text!r}", timeout=2)
            return
        index = (last.index + step) % len(hits)
        self.last = SearchPick(last.query, hits, index)
        app.notify(f"Hit {index + 1} of {len(hits)}", timeout=1.5)
        self.jobs.when_idle(lambda: self.go_to_hit(hits[index]), stop=True)
