"""Narrow terminals: the branch pane's width follows the terminal (and a key resizes it,
remembered); every dialog fits 80x24 whole, and scrolls in a smaller terminal."""

from __future__ import annotations

import pytest
from textual.containers import Vertical

from loomterm.tui.actions.view import tree_width
from loomterm.tui.prefs import load_prefs
from tests.tui.conftest import settle
from tests.tui.screen_text import screen_text


def test_tree_width_follows_the_terminal():
    assert tree_width(100, 0.34) == 34
    assert tree_width(200, 0.34) == 68
    assert tree_width(40, 0.34) == 14  # the text keeps more than half of it
    assert tree_width(40, 0.7) == 16
    assert tree_width(80, 0.1) == 20  # never narrower than a few words


@pytest.mark.parametrize("width", [40, 80, 160])
async def test_the_branch_pane_leaves_the_text_most_of_a_narrow_terminal(make_app, width):
    app = make_app()
    async with app.run_test(size=(width, 20)) as pilot:
        await settle(pilot)
        assert app.branches.size.width + 1 == tree_width(width, 0.34)  # and its border
        assert app.view.size.width >= width // 2


async def test_a_key_resizes_the_branch_pane_and_it_is_remembered(make_app):
    app = make_app()
    async with app.run_test(size=(100, 20)) as pilot:
        await settle(pilot)
        before = app.branches.outer_size.width
        await pilot.press("alt+shift+right", "alt+shift+right")
        await pilot.pause()
        assert app.branches.outer_size.width == before + 10
        await pilot.press("alt+shift+left")
        await pilot.pause()
        assert app.branches.outer_size.width == before + 5
        await pilot.resize_terminal(60, 20)
        await pilot.pause()
        assert app.branches.outer_size.width == tree_width(60, 0.39)
    assert load_prefs().tree_share == pytest.approx(0.39)


DIALOGS = {
    "settings": "f2",
    "export": "ctrl+e",
    "help": "f1",
    "sessions": "ctrl+o",
    "new chat": "new_chat",
    "archive": "alt+h",
    "alternatives": "alternatives",
}


async def open_dialog(pilot, how: str) -> None:
    app = pilot.app
    if how == "new_chat":
        await app.run_action("new_chat")
        await pilot.pause()
        await pilot.press("y")  # yes, in a new session
    elif how == "alternatives":
        app.doc.move_to(len("Once upon a time"))
        await pilot.press("ctrl+a")
    else:
        await pilot.press(how)
    await settle(pilot)


@pytest.fixture
def story(loom):
    stem = loom.append(loom.root, "Once upon a time")
    loom.cursor = loom.generate(stem, 12)[0]
    loom.append(stem, " another")
    return loom


@pytest.mark.parametrize("name", list(DIALOGS))
async def test_every_dialog_fits_80x24_and_scrolls_below(make_app, story, name):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await open_dialog(pilot, DIALOGS[name])
        box = app.screen.query_one(Vertical)
        region = box.region
        assert region.x >= 0 and region.right <= 80 and region.bottom <= 24
        assert box.max_scroll_y == 0, f"{name} does not fit 80x24"
        await pilot.resize_terminal(40, 10)
        await pilot.pause(0.3)
        region = box.region
        assert region.right <= 40 and region.bottom <= 10
        if name not in ("help", "archive"):  # help scrolls its table; the question wraps
            assert box.max_scroll_y > 0 or box.virtual_size.height <= box.size.height


async def test_a_40x12_terminal_keeps_the_status_and_footer_whole(make_app, story):
    app = make_app()
    async with app.run_test(size=(40, 12)) as pilot:
        await settle(pilot)
        *_, status, footer = screen_text(app).splitlines()
        # The status line drops the least needed parts instead of being cut.
        assert "\u2026" not in status
        assert status.strip().startswith("tiny-llama") and status.endswith("tok/s")
        assert "/" in status.split("\u2502")[1]  # where the caret is: 2/2 d1
        # Only whole keys beside the palette's key, which ends the line.
        assert footer.endswith("\u258f^p palette")
        keys = footer.split("\u258f")[0].split()
        words = {"^q", "Quit", "^g", "Generate", "^r", "Regen", "^n", "N\u00d7"}
        assert keys and set(keys) <= words, keys
        palette = app.query_one(".-command-palette")
        for key in app.query("KeyFooter > FooterKey"):
            assert key is palette or key.region.right <= palette.region.x


async def test_the_settings_fields_stay_usable_at_40x12(make_app, story):
    app = make_app()
    async with app.run_test(size=(40, 12)) as pilot:
        await settle(pilot)
        await pilot.press("f2")
        await settle(pilot)
        field = app.screen.query_one("#setting-temperature")
        assert field.region.width >= 20  # under its label, the dialog's width
        lines = screen_text(app).splitlines()
        row = next(i for i, line in enumerate(lines) if "Temperature" in line)
        assert lines[row + 1].strip("\u2588 ").startswith(field.value)
        await pilot.press("tab")  # the next field scrolls into view, whole
        await settle(pilot)
        top_p = app.screen.query_one("#setting-top_p")
        assert app.screen.focused is top_p and top_p.region.width >= 20
