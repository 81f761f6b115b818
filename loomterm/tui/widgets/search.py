"""The search dialog: a query over the text of every branch, its hits as a list.

Typing searches at once (``loomterm.search``, a few milliseconds on a tree of hundreds
of nodes, on a thread of its own: keys answer while a long one runs, and each newer
query stops the one before); each hit shows the branch it is on (``2.1.3``: the second branch, then its
first, then its third) and a snippet with the match marked. Enter (or a click) goes to
the hit; alt+r switches regular expressions on and off, alt+c case matching, alt+h
archived (hidden) branches, left out by default as the branch pane leaves them out. A
bad or too costly regular expression shows its one-line error in place of the hits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.timer import Timer
from textual.widgets import Checkbox, Input, Label, OptionList
from textual.widgets.option_list import Option

from loomterm.errors import InputError
from loomterm.search import Hit, Query, SearchResult, branch_label
from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.dialogs import DialogScreen, dialog_css, dialog_title
from loomterm.tui.widgets.fields import Field, FieldForm

SHOWN = 200  # hits listed at most (the count says how many there are)
DELAY = 0.05  # seconds of no typing before searching
ENTER_BUDGET_S = 0.2  # enter before the hits came: searched at once if this is enough


class Searcher(Protocol):
    """What the dialog searches with (``tui.controllers.search.Search``)."""

    def start(self, query: Query, done: Callable[[SearchResult | InputError], None]) -> None:
        """Search on a thread; ``done`` on the UI thread (not after a newer start)."""

    def run_now(self, query: Query, budget_s: float) -> SearchResult | InputError | None:
        """Search here if it takes under ``budget_s``; None when it needs longer."""

    def stop(self) -> None:
        """Stop the running search."""


@dataclass(frozen=True)
class SearchPick:
    """What the dialog ended with: the query, its hits, and the one chosen."""

    query: Query
    hits: list[Hit]
    index: int


class SearchScreen(DialogScreen["SearchPick | None"], FieldForm):
    """Search every branch; dismisses with the chosen hit (None: escape)."""

    DEFAULT_CSS = dialog_css(
        "SearchScreen",
        """
        & > Vertical { width: 100; }
        & #search-options { height: 1; margin-top: 1; }
        & #search-options Checkbox { margin-right: 2; }
        & #search-status { width: 100%; color: $text-muted; margin-top: 1; }
        & #search-status.-error { color: $error; }
        & OptionList { height: auto; max-height: 16; margin-top: 1; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="search_cancel"),
        # Priority: a terminal's alt+r arrives as a printable "r", which the focused
        # query field would otherwise type instead of the binding running.
        Binding("alt+r", "toggle('regex')", "Regex", id="search_regex", priority=True),
        Binding("alt+c", "toggle('case')", "Match case", id="search_case", priority=True),
        Binding("alt+h", "toggle('archived')", "Archived", id="search_archived", priority=True),
        Binding("down", "hit(1)", "Next hit", show=False, id="search_down"),
        Binding("up", "hit(-1)", "Previous hit", show=False, id="search_up"),
    ]

    def __init__(self, searcher: Searcher, query: Query | None = None) -> None:
        super().__init__()
        self.searcher = searcher
        self._pick_when_found = False  # enter came before the search's result
        self.query_start = query or Query("")
        self.result: SearchResult | None = None
        self.current: Query | None = None
        self._timer: Timer | None = None

    def compose(self) -> ComposeResult:
        start = self.query_start
        with Vertical():
            yield dialog_title("Search every branch")
            yield Field(start.text, placeholder="text, or a regular expression", id="search-text")
            with Horizontal(id="search-options"):
                yield Checkbox("Regular expression (alt+r)", start.regex, id="regex", compact=True)
                yield Checkbox("Match case (alt+c)", start.case, id="case", compact=True)
                yield Checkbox(
                    "Archived branches (alt+h)", start.archived, id="archived", compact=True
                )
            yield Label("", id="search-status", markup=False)
            yield OptionList(id="search-hits", markup=False)
            yield Label(
                "each hit starts with where it is: branch 2.1.3 is, at each fork from the "
                "top, the 2nd branch, then the 1st, then the 3rd (main text: above every "
                "fork)\n"
                "enter: go to the hit · later, alt+n / alt+shift+n: the next / previous hit",
                classes="dialog--hint",
                markup=False,
            )

    def on_mount(self) -> None:
        self.query_one("#search-text", Field).focus()
        if self.query_start.text:
            self.search_now()

    # -- searching ---------------------------------------------------------------------
    def _query(self) -> Query:
        return Query(
            self.query_one("#search-text", Field).value,
            regex=self.query_one("#regex", Checkbox).value,
            case=self.query_one("#case", Checkbox).value,
            archived=self.query_one("#archived", Checkbox).value,
        )

    def on_input_changed(self, event: Input.Changed) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(DELAY, self.search_now)

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        self.search_now()

    def search_now(self) -> None:
        """Search with what the dialog holds now; the hits are listed when they come."""
        self._timer = None
        query = self._query()
        self.current, self.result = query, None
        if query.text:
            self.query_one("#search-status", Label).update("searching\u2026")
        self.searcher.start(query, lambda outcome: self.show_result(query, outcome))

    def show_result(self, query: Query, outcome: SearchResult | InputError) -> None:
        """List the hits of ``query`` (or show its one-line error)."""
        if query != self.current or not self.is_attached:
            return
        status = self.query_one("#search-status", Label)
        hits = self.query_one("#search-hits", OptionList)
        hits.clear_options()
        if isinstance(outcome, InputError):
            status.update(safe_line(outcome))
            status.add_class("-error")
            self._pick_when_found = False
            return
        result = outcome
        status.remove_class("-error")
        self.result = result
        if not query.text:
            status.update("")
            return
        count = f"{len(result.hits)}{'+' if result.more else ''}"
        status.update(
            f"{count} hit{'s' if count != '1' else ''} in {result.nodes} node{'' if result.nodes == 1 else 's'}"
            + (f" · the first {SHOWN} listed" if len(result.hits) > SHOWN else "")
            + (
                f" · {result.archived} archived branch{'es' if result.archived > 1 else ''}"
                " not searched (alt+h)"
                if result.archived
                else ""
            )
        )
        hits.add_options(
            [Option(_hit_line(hit), id=str(i)) for i, hit in enumerate(result.hits[:SHOWN])]
        )
        if result.hits:
            hits.highlighted = 0
        if self._pick_when_found:
            self._pick_when_found = False
            self._pick(0)

    # -- choosing ----------------------------------------------------------------------
    def action_toggle(self, name: str) -> None:
        box = self.query_one(f"#{name}", Checkbox)
        box.value = not box.value

    def action_hit(self, step: int) -> None:
        hits = self.query_one("#search-hits", OptionList)
        if hits.option_count:
            now = hits.highlighted if hits.highlighted is not None else -step
            hits.highlighted = max(0, min(hits.option_count - 1, now + step))

    def field_submitted(self, field: Field) -> None:
        # Enter before the hits came (the field's Changed messages may not even have
        # reached this screen yet): searched at once, so that the keys after enter land
        # at the hit; a long search picks its first hit when it is done.
        if self._timer is not None or self._query() != self.current or self.result is None:
            if self._timer is not None:
                self._timer.stop()
                self._timer = None
            query = self._query()
            self.current, self.result = query, None
            outcome = self.searcher.run_now(query, ENTER_BUDGET_S)
            if outcome is None:  # a long search: on its thread, the first hit when done
                self._pick_when_found = True
                self.search_now()
                return
            self.show_result(query, outcome)
        hits = self.query_one("#search-hits", OptionList)
        if hits.highlighted is not None:
            self._pick(hits.highlighted)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self._pick(event.option_index)

    def _pick(self, index: int) -> None:
        if self.result is None or self.current is None or not self.result.hits:
            return
        self.dismiss(SearchPick(self.current, self.result.hits, index))

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_unmount(self) -> None:
        self.searcher.stop()  # a search still running is of no use now


def place_label(hit: Hit) -> str:
    """``branch 2.1`` (the branch taken at each fork), or ``main text`` above them all."""
    label = branch_label(hit.node)
    return "main text" if label == "main" else f"branch {label}"


def _hit_line(hit: Hit) -> Text:
    """``branch 2.1 │ …text before HIT text after…`` with the hit highlighted."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{place_label(hit)} \u2502 ", style="dim")
    line.append(("\u2026" if hit.before else "") + safe_line(hit.before).lstrip())
    line.append(safe_line(hit.match), style="bold reverse")
    line.append(safe_line(hit.after))
    return line
