"""The branch pane read at a glance: a cursor seen without colours, folded runs of single
children (right unfolds, left folds back), marked nodes never folded away."""

from __future__ import annotations

import pytest
from rich.color import ColorSystem
from rich.segment import Segment

from loomterm.tui.widgets.branch_tree import CURSOR_MARK
from tests.tui.conftest import TERMINAL, settle
from tests.tui.test_navigation import tree_rows

STORY = 40  # nodes in the long single-child story


@pytest.fixture
def story(loom):
    """root -> a story of STORY single children -> three endings; the cursor on the
    second ending."""
    node = loom.root
    story = []
    for i in range(STORY):
        node = loom.append(node, f" Step {i} of the story.")
        story.append(node)
    endings = [loom.append(node, f" Ending {name}.") for name in ("alpha", "beta", "gamma")]
    loom.cursor = endings[1]
    return {"story": story, "endings": endings}


def ansi(segments: list[Segment], system: ColorSystem | None) -> str:
    """The row as a terminal gets it with ``system`` colours (None: ``NO_COLOR``)."""
    if system is None:
        segments = list(Segment.remove_color(segments))
    return "".join(
        seg.style.render(seg.text, color_system=system or ColorSystem.STANDARD)
        if seg.style
        else seg.text
        for seg in segments
    )


def has_reverse(line: str) -> bool:
    """Any SGR sequence in ``line`` turns reverse video on (parameter 7)."""
    import re

    return any("7" in seq.split(";") for seq in re.findall(r"\x1b\[([0-9;]*)m", line))


async def test_the_cursor_shows_in_every_colour_system(make_app, loom, story):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await pilot.press("f4")  # focus the branch pane
        await pilot.press("home")  # the cursor on the start row, away from the current row
        await pilot.press("down")
        await settle(pilot)
        tree = app.branches
        assert tree.has_focus and tree.cursor_row == 1 != tree.current_row
        lines = [list(tree.render_line(y)) for y in range(len(tree.rows))]
        for system in (ColorSystem.STANDARD, ColorSystem.EIGHT_BIT, ColorSystem.TRUECOLOR, None):
            drawn = [ansi(line, system) for line in lines]
            cursor = drawn[tree.cursor_row]
            assert CURSOR_MARK in cursor and has_reverse(cursor), (system, cursor)
            others = [line for i, line in enumerate(drawn) if i != tree.cursor_row]
            assert not any(CURSOR_MARK in line for line in others)
            # Colours gone, the cursor row still differs from every other row's attributes
            # and text: not only from the current row's.
            assert all(line != cursor for line in others)
        await pilot.press("escape")  # back to the text: no marker on an unfocused pane
        await settle(pilot)
        assert not any(CURSOR_MARK in row for row in tree_rows(app))


@pytest.mark.parametrize("columns", [TERMINAL[0], 200])
async def test_a_long_story_folds_into_one_row_and_every_ending_shows(
    make_app, loom, story, columns
):
    app = make_app()
    async with app.run_test(size=(columns, TERMINAL[1])) as pilot:
        await settle(pilot)
        rows = tree_rows(app)
        for name in ("alpha", "beta", "gamma"):
            assert any(f"Ending {name}." in row for row in rows), rows
        story_rows = [row for row in rows if f"({STORY} nodes) [3]" in row]
        assert len(story_rows) == 1, rows
        # Its first words … its last words, as many as the pane's width has room for.
        assert "Step 0" in story_rows[0] and "\u2026" in story_rows[0], rows
        assert story_rows[0].split("\u2026")[1].endswith(f"story. ({STORY} nodes) [3]")
        if columns > TERMINAL[0]:
            assert "Step 0 of the story." in story_rows[0]
            assert f"Step {STORY - 1} of the story. ({STORY} nodes)" in story_rows[0]
        assert len(app.branches.rows) == 5  # start, the story, three endings


async def test_right_unfolds_a_run_left_folds_it_back_enter_goes_to_its_end(make_app, loom, story):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        tree = app.branches
        await pilot.press("f4", "home", "down")
        await settle(pilot)
        assert tree.rows[tree.cursor_row].count == STORY
        await pilot.press("right")
        await settle(pilot)
        assert len(tree.rows) == 4 + STORY
        assert [row.chain.first for row in tree.rows[1 : 1 + STORY]] == story["story"]
        rows = tree_rows(app)
        assert any("Step 3 of the story." in row for row in rows), rows
        await pilot.press("down", "down", "down", "down", "down", "enter")  # a node of it
        await settle(pilot)
        assert loom.cursor is story["story"][5]
        assert app.doc.text.endswith("Step 5 of the story.")
        await pilot.press("left")  # from inside the run: folds it back, the cursor on it
        await settle(pilot)
        assert len(tree.rows) == 5 and tree.cursor_row == 1
        await pilot.press("enter")  # the folded run: to its last node
        await settle(pilot)
        assert loom.cursor is story["story"][-1]


async def test_marked_nodes_inside_a_run_stay_in_sight(make_app, loom, story):
    """A bookmark, a rating or an archived node (archived shown) splits the run there."""
    nodes = story["story"]
    loom.set_meta(nodes[10], bookmark=True)
    loom.set_meta(nodes[20], rating=1)
    loom.set_meta(nodes[30], hidden=True)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        tree = app.branches
        # Archived and not shown: the story stops being seen at node 30 (as before).
        firsts = [row.chain.first for row in tree.rows]
        assert nodes[10] in firsts and nodes[20] in firsts
        rows = tree_rows(app)
        assert any("\u2605 Step 10 of" in row for row in rows), rows
        assert any("\u2713 Step 20 of" in row for row in rows), rows
        tree.show_hidden = True
        app.panes.rebuild_tree()
        await settle(pilot)
        firsts = [row.chain.first for row in tree.rows]
        assert nodes[30] in firsts
        counts = [row.count for row in tree.rows[1:5]]
        assert counts == [10, 10, 10, 10], counts
        for name in ("alpha", "beta", "gamma"):
            assert any(f"Ending {name}." in row for row in tree_rows(app))


@pytest.mark.parametrize(
    "extra_env",
    [{"TERM": "screen-256color"}, {"TERM": "screen-256color", "NO_COLOR": "1"}],
    ids=["screen-256color", "NO_COLOR"],
)
def test_the_cursor_in_a_real_terminal(tmux_run, tiny_llama_dir, extra_env):
    """tmux with a 256-colour TERM (and with NO_COLOR): the cursor row carries reverse
    video and the marker, read back with ``capture-pane -e``."""
    from loomterm.sessions.session import close_session, save_loom, session_path
    from tests.helpers import make_loom
    from tests.tui.test_tmux import idle

    loom = make_loom(tiny_llama_dir)
    save_loom(loom, session_path("pane"))
    node = loom.root
    for i in range(12):
        node = loom.append(node, f" Step {i} of the story.")
    endings = [loom.append(node, f" Ending {name}.") for name in ("alpha", "beta")]
    loom.cursor = endings[0]
    close_session(loom)

    term = tmux_run(
        ["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "pane"], extra_env=extra_env
    )
    term.wait_for(lambda s: idle(s) and "(12 nodes)" in s, what="the editor and its pane")
    term.keys("F4")
    # The pane draws its cursor only once it has the focus: Home before that moved the
    # document's caret instead, under load.
    term.wait_for(lambda s: CURSOR_MARK in s, what="the branch pane focused")
    term.keys("Home")
    term.keys("Down")
    term.wait_for(lambda s: f"\u2514{CURSOR_MARK}" in s, what="the cursor on the story's row")
    rows = term.screen(escapes=True).splitlines()
    marked = [row for row in rows if CURSOR_MARK in row]
    assert len(marked) == 1 and "(12 nodes)" in marked[0], marked
    assert has_reverse(marked[0].partition("\u2595")[0]), repr(marked[0])
    term.keys("C-q")
    assert term.exit_status() == "0"


async def test_new_branches_are_unread_until_visited_and_the_mark_is_saved(
    make_app, loom, tmp_path
):
    """ctrl+n writes three branches: the one shown is read, the other two carry a dot
    until the writer goes there; the marks are in the session file."""
    from loomterm.sessions.session import close_session, load_session, save_loom
    from loomterm.tui.widgets.branch_tree import UNREAD_MARK
    from tests.tui.conftest import paste

    path = tmp_path / "unread.loom"
    save_loom(loom, path)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("ctrl+n")
        await settle(pilot)
        shown = loom.cursor
        kids = list(shown.parent.children)
        assert len(kids) == 3
        others = [kid for kid in kids if kid is not shown]
        assert not shown.meta.get("unread")
        assert all(kid.meta.get("unread") for kid in others)
        dots = [row for row in tree_rows(app) if UNREAD_MARK.strip() in row]
        assert len(dots) == 2, tree_rows(app)
        await pilot.press("alt+right")  # to the next sibling: read now
        await settle(pilot)
        assert loom.cursor in others and not loom.cursor.meta.get("unread")
        dots = [row for row in tree_rows(app) if UNREAD_MARK.strip() in row]
        assert len(dots) == 1, tree_rows(app)
        left = next(kid for kid in others if kid is not loom.cursor)
    close_session(loom)  # flushed
    data = load_session(path)
    assert data.tree.nodes[left.id].meta.get("unread") is True
    assert not data.tree.nodes[shown.id].meta.get("unread")
