"""Moving around the tree: siblings, branch points, undo/redo, the branch pane,
bookmarks and archived branches."""

from __future__ import annotations

import pytest

from tests.tui.conftest import TERMINAL, paste, settle
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


async def test_alt_right_and_left_switch_siblings(make_app, loom, branched):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+right")
        await settle(pilot)
        assert loom.cursor is branched["dog"]
        assert app.doc.text == "Once upon a time there was a dog"
        assert "there was a dog" in screen_text(app)
        await pilot.press("alt+right")
        await settle(pilot)
        assert branched["king"].is_ancestor_of(loom.cursor)
        await pilot.press("alt+right")  # wraps around
        await settle(pilot)
        assert loom.cursor is branched["cat"]
        await pilot.press("alt+left")
        await settle(pilot)
        assert branched["king"].is_ancestor_of(loom.cursor)


async def test_siblings_of_the_branch_under_the_caret(make_app, loom, branched):
    loom.cursor = branched["sang"]
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+right")  # the caret is in " who sang."
        await settle(pilot)
        assert loom.cursor is branched["wept"]
        # Caret into " lived a king": its siblings are the cat and the dog.
        app.doc.move_to(len("Once upon a time lived"))
        await pilot.press("alt+left")
        await settle(pilot)
        assert loom.cursor is branched["dog"]


async def test_alt_up_and_down_move_between_branch_points(make_app, loom, branched):
    loom.cursor = branched["wept"]
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        assert app.doc.caret == app.doc.length
        await pilot.press("alt+up")
        await settle(pilot)
        assert app.doc.caret == len("Once upon a time lived a king")
        await pilot.press("alt+up")  # where the cat, the dog and the king fork
        await settle(pilot)
        assert app.doc.caret == len("Once upon a time")
        await pilot.press("alt+up")
        await settle(pilot)
        assert app.doc.caret == len("Once upon a time")  # no branch point above
        await pilot.press("alt+down")
        await settle(pilot)
        assert app.doc.caret == len("Once upon a time lived a king")
        await pilot.press("alt+down")
        await settle(pilot)
        assert app.doc.caret == app.doc.length


async def test_alt_up_from_a_sibling_goes_to_its_fork(make_app, loom, branched):
    """One prompt, several siblings: alt+up from a sibling's end reaches the prompt's
    end, where the siblings fork (it used to say "No branch point above")."""
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        assert app.doc.text == "Once upon a time there was a cat"
        await pilot.press("alt+up")
        await settle(pilot)
        assert app.doc.caret == len("Once upon a time")
        await pilot.press("alt+down")
        await settle(pilot)
        assert app.doc.caret == app.doc.length


async def test_undo_and_redo_walk_back_through_edits_and_generations(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Hello")
        await settle(pilot)
        typed = loom.cursor
        await pilot.press("ctrl+g")
        await settle(pilot)
        generated = loom.cursor
        count = len(loom.tree.nodes)
        await pilot.press("ctrl+z")
        await settle(pilot)
        assert loom.cursor is typed
        assert app.doc.text == "Hello"
        await pilot.press("ctrl+z")
        await settle(pilot)
        assert loom.cursor is loom.root
        assert app.doc.text == ""
        await pilot.press("ctrl+y", "ctrl+y")
        await settle(pilot)
        assert loom.cursor is generated
        assert len(loom.tree.nodes) == count  # nothing was deleted or added


async def test_undo_of_unsynced_typing_keeps_it_in_the_tree(make_app, loom):
    app = make_app(sync_delay=10.0)
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "draft")
        await pilot.press("ctrl+z")
        await settle(pilot)
        assert app.doc.text == ""
        await pilot.press("ctrl+y")
        await settle(pilot)
        assert app.doc.text == "draft"


async def test_branch_pane_shows_the_tree_and_selecting_moves_there(make_app, loom, branched):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "Once upon a time [3]" in text  # a branch point with its count
        assert "there was a dog" in text and "who wept." in text
        tree = app.branches
        row = tree.entries[branched["dog"].id]
        tree.focus()
        tree.move_cursor(row)
        await pilot.press("enter")
        await settle(pilot)
        assert loom.cursor is branched["dog"]
        assert app.doc.text == "Once upon a time there was a dog"


async def test_ctrl_t_toggles_the_branch_pane(make_app, loom, branched):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        assert app.branches.display and not app.branches.has_class("-hidden")
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert app.branches.has_class("-hidden")
        assert "Once upon a time [3]" not in screen_text(app)
        await pilot.press("ctrl+t")
        await pilot.pause(0.2)
        assert "Once upon a time [3]" in screen_text(app)


async def test_bookmarks(make_app, loom, branched):
    loom.cursor = branched["dog"]
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+s")
        await settle(pilot)
        assert branched["dog"].meta.get("bookmark") is True
        assert "\u2605" in screen_text(app)
        await pilot.press("alt+left")
        await settle(pilot)
        assert loom.cursor is branched["cat"]
        await pilot.press("alt+m")
        await settle(pilot)
        assert loom.cursor is branched["dog"]
        await pilot.press("alt+s")
        await settle(pilot)
        assert "bookmark" not in branched["dog"].meta


async def test_hiding_a_branch_asks_first_and_can_be_undone(make_app, loom, branched):
    loom.cursor = branched["dog"]
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+h")
        await pilot.pause()
        assert "Archive the branch" in screen_text(app)
        await pilot.press("n")
        await settle(pilot)
        assert not branched["dog"].meta.get("hidden")
        await pilot.press("alt+h")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot)
        assert branched["dog"].meta.get("hidden") is True
        assert loom.cursor is not branched["dog"]
        assert "there was a dog" not in screen_text(app)
        # Siblings skip it now.
        for _ in range(3):
            await pilot.press("alt+right")
            await settle(pilot)
            assert loom.cursor is not branched["dog"]
        # Archived branches can be shown and restored.
        await app.run_action("toggle_hidden")
        await settle(pilot)
        assert "there was a dog" in screen_text(app)
        app.navigation.go_to(branched["dog"])
        await settle(pilot)
        await app.run_action("unhide_branch")
        await settle(pilot)
        assert not branched["dog"].meta.get("hidden")


def status_line(app) -> str:
    return screen_text(app).splitlines()[-2]


async def test_the_status_bar_says_which_sibling_and_how_deep_the_caret_is(
    make_app, loom, branched
):
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        assert "sibling 1 of 3 \u00b7 depth 1" in status_line(app)  # the cat
        await pilot.press("alt+right")
        await settle(pilot)
        assert "sibling 2 of 3 \u00b7 depth 1" in status_line(app)  # the dog
        await pilot.press("alt+right")
        await settle(pilot)
        assert "sibling 3 of 3 \u00b7 depth 1" in status_line(app)  # the caret after the king
        await pilot.press("ctrl+end")
        await settle(pilot)
        assert "sibling 2 of 2 \u00b7 depth 2" in status_line(app)  # the king, who wept
        await pilot.press("ctrl+home", "right")
        await settle(pilot)
        assert "sibling 1 of 1 \u00b7 depth 0" in status_line(app)  # the stem


def tree_rows(app) -> list[str]:
    """The branch pane's rows as drawn (left of its border)."""
    return [line.partition("\u2595")[0].strip() for line in screen_text(app).splitlines()]


async def test_branch_pane_labels_follow_the_text_as_it_streams(make_app, loom, monkeypatch):
    """ctrl+n: the siblings not shown are labelled by their text, not by the first token
    they had when the pane was rebuilt for them."""
    import threading

    from loomterm.tui.controllers.generation_job import Streamer
    from loomterm.tui.sanitize import safe_line

    gate = threading.Event()
    on_token = Streamer.on_token

    def held(streamer, node, token_id, piece):
        on_token(streamer, node, token_id, piece)
        if streamer.total == 3:  # each of the 3 rows has its first token
            gate.wait(10)

    monkeypatch.setattr(Streamer, "on_token", held)
    loom.update_settings(temperature=1.0, max_new_tokens=24)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("ctrl+n")
        for _ in range(100):  # the pane is rebuilt with the three new rows
            await pilot.pause(0.05)
            if len(app.branches.rows) == 5:
                break
        await pilot.pause(0.3)
        gate.set()
        await settle(pilot)
        kids = loom.cursor.parent.children
        assert len(kids) == 3
        rows = tree_rows(app)
        for kid in kids:
            label = safe_line(loom.decode(list(kid.tokens)).strip())[:20]
            assert any(label in row for row in rows), (label, rows)


async def test_archiving_a_middle_sibling_goes_to_its_neighbour(make_app, loom):
    stem = loom.append(loom.root, "Once upon a time")
    kids = [loom.append(stem, f" branch number {i}") for i in range(1, 7)]
    loom.cursor = kids[1]  # sibling 2 of 6
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        app.doc.move_to(app.doc.length)
        await pilot.pause()
        assert "sibling 2 of 6" in status_line(app)
        await pilot.press("alt+h")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot)
        assert kids[1].meta.get("hidden") is True
        assert loom.cursor is kids[2]  # the next one took its place, not the last
        assert app.doc.text == "Once upon a time branch number 3"
        assert "sibling 2 of 5" in status_line(app)
        # The last sibling archived: the one before it.
        app.navigation.go_to(kids[5])
        await settle(pilot)
        await pilot.press("alt+h")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot)
        assert loom.cursor is kids[4]
