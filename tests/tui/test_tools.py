"""Search, ratings and tidying the tree in the editor (Pilot, the real engine on the
tiny Llama): the keys, what the screen shows, what the tree and the session hold, and
undo and redo of each structural change."""

from __future__ import annotations

import pytest

from loomterm.tree import rating_of
from loomterm.tui.branch_labels import preview
from loomterm.tui.terminal.parser import TerminalParser
from loomterm.tui.widgets.search import SearchScreen
from tests.helpers import assert_matches_recompute
from tests.tui.conftest import TERMINAL, settle, type_text
from tests.tui.screen_text import screen_text


@pytest.fixture
def branched(loom):
    """root -> "Once upon a time" -> {" there was a cat", " there was a dog", " lived a
    king" -> {" who sang.", " who wept."}}; the cursor on the cat."""
    stem = loom.append(loom.root, "Once upon a time")
    cat = loom.append(stem, " there was a cat")
    dog = loom.append(stem, " there was a dog")
    king = loom.append(stem, " lived a king")
    sang = loom.append(king, " who sang.")
    wept = loom.append(king, " who wept.")
    loom.cursor = cat
    return {"stem": stem, "cat": cat, "dog": dog, "king": king, "sang": sang, "wept": wept}


def shape(loom):
    return sorted(
        (n.id, n.parent.id if n.parent else None, [c.id for c in n.children], list(n.tokens))
        for n in loom.tree.nodes.values()
    )


# -- search ---------------------------------------------------------------------------


async def test_search_lists_hits_and_enter_goes_there(make_app, loom, branched):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("ctrl+f")
        await pilot.pause()
        assert isinstance(app.screen, SearchScreen)
        await type_text(pilot, "WEPT")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "1 hit in 6 nodes" in text
        assert "branch 3.2 \u2502" in text  # the third branch, then its second
        # ...and the dialog says what such a label means.
        flat = " ".join(text.replace("\u2588", " ").split())
        assert "branch 2.1.3 is, at each fork from the top, the 2nd branch" in flat
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, SearchScreen)
        assert loom.cursor is branched["wept"]
        hit = app.doc.text.index(" who wept") + 5
        assert app.doc.caret == hit and app.doc.text[hit : hit + 4] == "wept"


async def test_next_and_previous_hit_and_a_bad_regex(make_app, loom, branched):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("ctrl+f")
        await pilot.pause()
        await pilot.press("alt+r")  # regular expressions on
        await type_text(pilot, "(unclosed")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "bad regular expression: missing ), unterminated subpattern" in text
        assert "Traceback" not in text
        for _ in range(len("(unclosed")):
            await pilot.press("backspace")
        await type_text(pilot, r"there was a \w+")
        await pilot.pause(0.2)
        assert "2 hits" in screen_text(app)
        await pilot.press("enter")
        await settle(pilot)
        assert loom.cursor is branched["cat"]
        await pilot.press("alt+n")
        await settle(pilot)
        assert loom.cursor is branched["dog"]
        assert app.doc.text[app.doc.caret :].startswith("there was a dog")
        await pilot.press("alt+n")  # wraps around
        await settle(pilot)
        assert loom.cursor is branched["cat"]
        await pilot.press("alt+shift+n")
        await settle(pilot)
        assert loom.cursor is branched["dog"]


async def test_search_toggles_from_a_real_terminal_with_the_query_focused(make_app, loom, branched):
    """A terminal sends alt+r as ESC r, which the input parser reads as a printable key
    ("r", as Textual's does): the toggles must win over the focused query field, not type
    an "r" into it."""

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("ctrl+f")
        await pilot.pause()
        await type_text(pilot, "wep")
        for sequence in ("\x1br", "\x1bc", "\x1bh"):
            parser = TerminalParser()
            (key,) = [*parser.feed(sequence), *parser.close()]
            assert key.is_printable  # what makes the query field take it
            app.post_message(key)
            await pilot.pause(0.2)
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        assert screen.query_one("#search-text").value == "wep"
        assert [screen.query_one(f"#{name}").value for name in ("regex", "case", "archived")] == [
            True,
            True,
            True,
        ]


async def test_search_leaves_archived_branches_out_until_alt_h(make_app, loom, branched):
    branched["dog"].meta["hidden"] = True  # what the archive command (alt+h) marks
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("ctrl+f")
        await pilot.pause()
        await type_text(pilot, "there was a")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "1 hit in 5 nodes" in text and "1 archived branch not searched (alt+h)" in text
        assert "there was a dog" not in text
        await pilot.press("alt+h")  # archived branches too
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "2 hits in 6 nodes" in text and "archived branch" not in text
        await pilot.press("down", "enter")
        await settle(pilot)
        assert loom.cursor is branched["dog"]
        await pilot.press("alt+n")  # the next hit keeps the archived branches in
        await settle(pilot)
        assert loom.cursor is branched["cat"]
        await pilot.press("alt+n")
        await settle(pilot)
        assert loom.cursor is branched["dog"]


# -- ratings ----------------------------------------------------------------------------


async def test_rating_keys_mark_the_branch_and_the_filter_hides(make_app, loom, branched):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+g")  # the caret is at the end of the cat's branch
        await settle(pilot)
        assert rating_of(branched["cat"]) == 1
        assert "\u2713 there was a cat" in screen_text(app)
        await pilot.press("alt+right")  # the dog
        await settle(pilot)
        await pilot.press("alt+x")
        await settle(pilot)
        assert rating_of(branched["dog"]) == -1
        assert "\u2717 there was a dog" in screen_text(app)
        await pilot.press("alt+x")  # again: cleared
        await settle(pilot)
        assert rating_of(branched["dog"]) is None and "rating" not in branched["dog"].meta
        await pilot.press("alt+x")
        await pilot.press("alt+left")  # back on the cat
        await settle(pilot)
        await pilot.press("alt+r")  # only good branches
        await settle(pilot)
        text = screen_text(app)
        assert "there was a cat" in text and "lived a king" not in text
        await pilot.press("alt+r")  # no bad ones
        await settle(pilot)
        text = screen_text(app)
        assert "lived a king" in text and "there was a dog" not in text
        await pilot.press("alt+r")  # every branch
        await settle(pilot)
        assert "there was a dog" in screen_text(app)


# -- tidying the tree -------------------------------------------------------------------


async def test_split_and_merge_at_the_caret_undo_and_redo(make_app, loom, branched):
    cat, stem = branched["cat"], branched["stem"]
    before = shape(loom)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        app.doc.move_to(len("Once upon a time there was"))
        await pilot.press("alt+k")
        await settle(pilot)
        head = cat.parent
        assert head is not stem and head.parent is stem
        assert loom.decode(head.tokens) == " there was" and loom.decode(cat.tokens) == " a cat"
        assert app.doc.text == "Once upon a time there was a cat"
        await pilot.press("ctrl+z")  # the split is undone: a merge
        await settle(pilot)
        assert shape(loom) == before and head.id not in loom.tree.nodes
        await pilot.press("ctrl+y")  # and done again: the same head comes back
        await settle(pilot)
        assert cat.parent is head and loom.tree.nodes[head.id] is head
        # Merge the caret's node (" a cat") back into its parent.
        app.doc.move_to(app.doc.length)
        await pilot.press("alt+j")
        await settle(pilot)
        assert shape(loom) == before and cat.parent is stem
        assert_matches_recompute(loom, cat)
        await pilot.press("ctrl+z")
        await settle(pilot)
        assert cat.parent is head
        # A node with siblings does not merge: one line, nothing changes.
        app.doc.move_to(len("Once upon a time"))
        await pilot.press("alt+j")
        await settle(pilot)
        assert stem.parent is loom.root


async def test_branch_pane_shows_a_split_nodes_tail_not_its_old_start(make_app, loom, branched):
    """A split keeps the node's id for its tail; the pane's text cache (by id and
    length) must not hand back what the node held at that length while it streamed."""
    cat = branched["cat"]
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        tail = loom.encode(" a cat")

        # The pane previewed the node while it had as many tokens as its tail will.
        class Streaming:
            id = cat.id
            tokens = cat.tokens[: len(tail)]

        assert app.panes.node_text(Streaming) != " a cat"
        app.doc.move_to(len("Once upon a time there was"))
        await pilot.press("alt+k")
        await settle(pilot)
        assert loom.decode(cat.tokens) == " a cat"
        assert app.panes.node_text(cat) == " a cat"
        await pilot.pause(0.5)
        row = app.branches.rows[app.branches.entries[cat.id]]  # the head and the tail
        assert preview(row, app.branches.text_of) == "there was a cat"


async def test_move_a_branch_and_undo(make_app, loom, branched):
    dog, king, sang = branched["dog"], branched["king"], branched["sang"]
    before = shape(loom)
    loom.cursor = dog
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+c")  # pick up the dog's branch
        await pilot.press("alt+right")  # to the king's branch
        await settle(pilot)
        assert king.is_ancestor_of(loom.cursor)
        app.doc.move_to(len("Once upon a time lived a"))  # inside " lived a king"
        await pilot.press("alt+y")
        await settle(pilot)
        head = dog.parent
        assert head.parent is branched["stem"] and loom.decode(head.tokens) == " lived a"
        assert king.parent is head and head.children == [king, dog]
        assert app.doc.text == "Once upon a time lived a there was a dog"
        assert loom.cursor is dog
        assert_matches_recompute(loom, dog)  # its KV and records were made again here
        assert sang.parent is king
        await pilot.press("ctrl+z")
        await settle(pilot)
        assert shape(loom) == before
        assert head.id not in loom.tree.nodes
        await pilot.press("ctrl+y")
        await settle(pilot)
        assert dog.parent is head and loom.tree.nodes[head.id] is head
        # Below itself: refused in one line.
        await pilot.press("alt+c")
        app.doc.move_to(app.doc.length)
        await pilot.press("alt+y")
        await settle(pilot)
        assert dog.parent is head


async def test_a_filter_says_why_it_keeps_the_branch_you_are_on(make_app, loom, branched):
    branched["cat"].meta["rating"] = 1
    branched["dog"].meta["rating"] = -1
    loom.cursor = branched["dog"]  # on a bad branch
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await pilot.press("alt+r")  # only good branches: the dog stays, and says why
        await settle(pilot)
        text = screen_text(app)
        assert "lived a king" not in text
        [dog] = [line for line in text.splitlines() if "(you are here)" in line]
        assert "\u2717 (you are here) there was" in dog  # the bad mark, then why it stays
        notes = [n.message for n in app._notifications]  # noqa: SLF001
        assert any("the branch you are on stays shown" in m for m in notes), notes
        await pilot.press("alt+r")  # no bad ones
        await settle(pilot)
        text = screen_text(app)
        assert "\u2717 (you are here) there was" in text and "lived a king" in text
        await pilot.press("alt+r")  # every branch: no notes
        await settle(pilot)
        assert "you are here" not in screen_text(app)
