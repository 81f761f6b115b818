"""The tree map (alt+o): the whole tree drawn compactly, the current path lit, bookmarks
and new branches marked, moved through with the keyboard; and hoisting (alt+z, alt+shift+z),
working inside one branch, kept in the session file."""

from __future__ import annotations

import pytest

from loomterm.sessions.session import close_session, load_session, open_loom, save_loom
from loomterm.tree import Origin, Tree
from loomterm.tree_map import BOOKMARK, NODE, ROOT, RUN, UNREAD, MapLayout
from loomterm.tui.widgets.tree_map import CURSOR_MARK, TreeMap, TreeMapScreen
from tests.tui.conftest import TERMINAL, settle


def complete(branching: int, depth: int) -> tuple[Tree, list]:
    """A complete tree: ``branching`` children per node, ``depth`` levels below the
    root (4 and 7: 21,845 nodes); its leaves, in order."""
    tree = Tree()
    level = [tree.root]
    for _ in range(depth):
        level = [tree.add(node, [1], Origin.MODEL) for node in level for _ in range(branching)]
    return tree, level


@pytest.fixture
def forest(loom):
    """root -> stem -> three branches; the second a run of two nodes then two
    endings; the cursor on the second ending. The first branch is bookmarked, the third
    unread."""
    stem = loom.append(loom.root, "Once upon a time")
    first = loom.append(stem, " a fox")
    second = loom.append(stem, " a hare")
    run = loom.append(second, " ran far")
    endings = [loom.append(run, f" to {w}.") for w in ("the hill", "the sea")]
    third = loom.append(stem, " a crow")
    first.meta["bookmark"] = True
    third.meta["unread"] = True
    loom.cursor = endings[1]
    return {"stem": stem, "first": first, "second": second, "endings": endings, "third": third}


def map_text(tree_map: TreeMap) -> list[str]:
    return [tree_map.render_line(y).text.rstrip() for y in range(len(tree_map.rows))]


def row_styles(tree_map: TreeMap, y: int) -> list[tuple[str, str]]:
    return [(seg.text, str(seg.style)) for seg in tree_map.render_line(y)]


async def open_map(pilot) -> TreeMap:
    await pilot.press("alt+o")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, TreeMapScreen)
    return screen.tree_map


async def test_the_map_draws_the_tree_with_the_path_lit(make_app, forest):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        tree_map = await open_map(pilot)
        lines = map_text(tree_map)
        # ⌂ root, ● stem, then ★ fox / ◆ hare ran far ┬ ● hill / ● sea / ○ crow.
        assert lines[0] == f"{ROOT}\u2500{NODE}\u252c{BOOKMARK}"
        assert lines[1] == f"   \u251c{RUN}\u252c{NODE}"
        assert lines[2] == f"   \u2502 {CURSOR_MARK}{NODE}"  # the cursor: the document's
        assert lines[3] == f"   \u2514{UNREAD}"
        assert tree_map.cursor is forest["endings"][1]
        # The path's glyphs are bold in the path colour, the others not; the document's
        # branch is underlined; the cursor reversed.
        path_style = tree_map.get_component_rich_style("tree-map--path", partial=True)
        assert path_style.bold
        cells = dict(row_styles(tree_map, 1))
        assert "bold" in cells[RUN]
        hill = [s for t, s in row_styles(tree_map, 1) if t == NODE][0]
        assert "bold" not in hill  # the first ending is off the path
        sea = [s for t, s in row_styles(tree_map, 2) if t == NODE][0]
        assert "underline" in sea and "reverse" in sea
        # Marks are their own colours.
        bookmark = tree_map.get_component_rich_style("tree-map--bookmark", partial=True)
        star = [seg.style for seg in tree_map.render_line(0) if seg.text == BOOKMARK][0]
        assert star.color == bookmark.color
        unread = tree_map.get_component_rich_style("tree-map--unread", partial=True)
        crow = [seg.style for seg in tree_map.render_line(3) if seg.text == UNREAD][0]
        assert crow.color == unread.color and crow.bold
        # The line under the map says what the cursor is on.
        assert "to the sea" in str(app.screen.query_one("#map-unit").render())


async def test_keys_move_between_parent_children_and_siblings(make_app, forest):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        tree_map = await open_map(pilot)
        await pilot.press("up")  # the previous sibling
        assert tree_map.cursor is forest["endings"][0]
        await pilot.press("h")  # the parent: the run " a hare ran far"
        assert tree_map.cursor is forest["second"]
        await pilot.press("j")  # next sibling: the crow
        assert tree_map.cursor is forest["third"]
        await pilot.press("k", "k")  # back past the hare to the fox
        assert tree_map.cursor is forest["first"]
        await pilot.press("left", "left")
        assert tree_map.cursor is app.loom.root
        await pilot.press("right", "right")  # toward the path: stem, then the hare
        assert tree_map.cursor is forest["second"]
        await pilot.press("end")
        assert tree_map.cursor is forest["third"]
        await pilot.press("home")
        assert tree_map.cursor is app.loom.root
        await pilot.press("c")  # back to the document's branch
        assert tree_map.cursor is forest["endings"][1]
        assert app.doc.node is forest["endings"][1]  # moving the map moves no document


async def test_enter_goes_there_and_escape_closes(make_app, forest):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await open_map(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, TreeMapScreen)
        assert app.doc.node is forest["endings"][1]
        tree_map = await open_map(pilot)
        await pilot.press("up", "enter")
        await settle(pilot)
        assert not isinstance(app.screen, TreeMapScreen)
        assert app.doc.node is forest["endings"][0]
        assert app.doc.text.endswith(" ran far to the hill.")
        # Going to the unread branch reads it: the map drawn again shows a plain node.
        tree_map = await open_map(pilot)
        await pilot.press("end", "enter")
        await settle(pilot)
        assert app.doc.node is forest["third"]
        assert not forest["third"].meta.get("unread")
        tree_map = await open_map(pilot)
        assert map_text(tree_map)[3].endswith(NODE)


async def test_a_key_costs_the_screen_not_the_tree(make_app, loom):
    """On the 21,845-node complete tree (4 children, 7 levels): the map draws only the
    rows on screen, and a key walks a few hundred units at most, not the tree."""

    def walked(depth: int) -> list[int]:
        """Units walked by an open and by each key on the complete tree ``depth`` deep,
        a 28-row screen drawn each time."""
        tree, leaves = complete(4, depth)
        layout = MapLayout(tree.root)
        start = leaves[len(leaves) // 3]
        path = layout.path_units(start)
        rows = layout.screen(layout.start(start), [], 28, centre=True)
        out = [layout.touched]
        for key in ("up", "down", "sibling", "page", "end"):
            layout.touched = 0
            cursor = layout.start(start)
            if key == "up":
                cursor = layout.up(cursor)
            elif key == "down":
                cursor = layout.down(layout.up(cursor), path)
            elif key == "sibling":
                cursor = layout.sibling(cursor, 1)
            elif key == "page":
                cursor = layout.step_rows(layout.row_of(cursor), 27)
            else:
                cursor = layout.last_row(layout.top)
            rows = layout.screen(cursor, rows, 28)
            for row in rows:
                layout.row(row, path)
            out.append(layout.touched)
        return out

    big, small = walked(7), walked(5)  # 21,845 nodes and 1,365
    assert max(big) < 1_000
    assert all(b <= 2 * s for b, s in zip(big, small, strict=True)), (big, small)

    # And in the editor: the real widget on a tree of 5,462 nodes.
    big = loom.append(loom.root, "Once")
    level = [big]
    for _ in range(6):
        level = [loom.tree.add(node, [5], Origin.MODEL) for node in level for _ in range(4)]
    loom.cursor = level[len(level) // 2]
    assert len(loom.tree.nodes) > 5_000
    from loomterm.tui.app import LoomApp

    app = LoomApp(loom, show_speed=False, sync_delay=0.05)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        tree_map = await open_map(pilot)
        height = tree_map.size.height
        for key in ("down", "pagedown", "end", "home", "c", "right", "left"):
            tree_map.drawn = 0
            tree_map.map_layout.touched = 0
            await pilot.press(key)
            await pilot.pause()
            assert tree_map.drawn <= 2 * height  # only rows on screen are drawn
            assert tree_map.map_layout.touched < 1_000


async def test_the_layout_is_kept_until_the_tree_changes(make_app, forest, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        tree_map = await open_map(pilot)
        first = tree_map.map_layout
        await pilot.press("escape")
        tree_map = await open_map(pilot)
        assert tree_map.map_layout is first  # the tree did not change
        flew = loom.append(forest["third"], " flew.")  # the tree grows, the map open
        await settle(pilot)
        assert tree_map.map_layout is not first
        assert tree_map.map_layout.end(forest["third"]) is flew  # the crow's run grew
        assert tree_map.cursor is forest["endings"][1]  # the cursor stays
        await pilot.press("end", "enter")
        await settle(pilot)
        assert app.doc.node is flew


async def test_hoist_and_unhoist_are_kept_in_the_session(
    make_app, loom, forest, tiny_llama_dir, tmp_path
):
    path = tmp_path / "story.loom"
    save_loom(loom, path)
    second = forest["second"]
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await pilot.press("alt+shift+z")  # not hoisted: says so
        await settle(pilot)
        assert "Not hoisted" in [n.message for n in app._notifications][-1]  # noqa: SLF001
        # The caret into " a hare", then hoist there.
        at = app.doc.text.index(" a hare") + 3
        app.doc.move_to(at)
        await pilot.press("alt+z")
        await settle(pilot)
        assert app.hoist.node is second
        # The pane shows the hoisted branch only; the map too.
        rows = [row.chain.first for row in app.branches.rows]
        assert rows[0] is second and forest["first"] not in rows and forest["third"] not in rows
        tree_map = await open_map(pilot)
        assert tree_map.map_layout.top is second
        assert map_text(tree_map)[0] == f"{ROOT}\u2500{NODE}\u252c{NODE}"  # hare, ran far
        assert len(tree_map.rows) == 2  # the two endings
        await pilot.press("escape")
        # The text above the hoist point is marked outside.
        outside = app.doc.text.index(" a hare")
        assert app.view.outside == outside
        line = list(app.view.render_line(0))
        muted = app.view.get_component_rich_style("document--outside", partial=True)
        before = [seg for seg in line if "Once" in seg.text][0]
        after = [seg for seg in line if "ran far" in seg.text][0]
        assert before.style.italic and before.style.color == muted.color
        assert not after.style.italic
        await pilot.press("ctrl+q")
        await pilot.pause(0.3)
    close_session(loom)
    assert load_session(path).hoist == second.id

    again = open_loom(path, model=str(tiny_llama_dir), device="cpu")
    try:
        app2 = make_app(target_loom=again)
        async with app2.run_test(size=TERMINAL) as pilot:
            await settle(pilot)
            assert app2.hoist.node is again.tree.nodes[second.id]
            assert app2.branches.rows[0].chain.first.id == second.id
            assert app2.view.outside == app2.doc.text.index(" a hare")
            await pilot.press("alt+shift+z")
            await settle(pilot)
            assert app2.hoist.node is None
            assert app2.branches.rows[0].chain.first is again.root
            assert app2.view.outside == 0
            await pilot.press("ctrl+q")
            await pilot.pause(0.3)
    finally:
        close_session(again)
    assert load_session(path).hoist is None


async def test_leaving_the_hoisted_branch_lets_go_of_the_hoist(make_app, loom, forest):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        app.doc.move_to(app.doc.text.index(" a hare") + 3)
        await pilot.press("alt+z")
        await settle(pilot)
        assert app.hoist.node is forest["second"]
        app.navigation.go_to(forest["first"])  # a bookmark's jump, say: outside
        await settle(pilot)
        assert app.hoist.node is None
        assert "Left the hoisted branch" in [n.message for n in app._notifications][-1]  # noqa: SLF001


def test_a_stored_hoist_is_read_only_when_it_names_a_node():
    from loomterm.store import hoisted

    assert hoisted({"node": 3}) == 3
    for bad in (None, 3, "3", {"node": "3"}, {"node": True}, {"node": -1}, {}, [3]):
        assert hoisted(bad) is None


def test_tree_map_snapshot(snap_compare, make_app, forest):
    """The map of a small tree: the path lit, the bookmark, the new branch, the cursor."""
    from pathlib import Path

    app = make_app(export_dir=Path("exports"))

    async def run_before(pilot):
        await settle(pilot)
        await pilot.press("alt+o")
        await settle(pilot)
        await pilot.press("up")  # the cursor off the document's branch
        await pilot.pause()

    assert snap_compare(app, terminal_size=TERMINAL, run_before=run_before)


async def test_a_click_moves_the_cursor_and_a_double_click_goes_there(make_app, forest):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        tree_map = await open_map(pilot)
        await pilot.click(tree_map, offset=(4, 0))  # the bookmarked fox's glyph
        await pilot.pause()
        assert tree_map.cursor is forest["first"]
        await pilot.double_click(tree_map, offset=(4, 3))  # the crow
        await settle(pilot)
        assert not isinstance(app.screen, TreeMapScreen)
        assert app.doc.node is forest["third"]
