"""Themes as files, the remembered theme and view toggles, and user key maps."""

from __future__ import annotations

import json

from loomterm.config.locations import config_dir
from loomterm.tui.prefs import load_prefs
from loomterm.tui.themes import bundled_themes_dir, load_themes, parse_theme
from tests.tui.conftest import TERMINAL, paste, settle
from tests.tui.screen_text import screen_text


def test_bundled_themes_are_found_and_complete():
    folder = bundled_themes_dir()
    assert folder is not None
    themes, problems = load_themes()
    assert problems == []
    names = {theme.name for theme in themes}
    assert {"loom-dark", "loom-light", "loom-high-contrast"} <= names
    light = next(t for t in themes if t.name == "loom-light")
    assert light.dark is False and light.variables["loom-model"].startswith("#")


def test_theme_file_parsing():
    theme = parse_theme("/* c */\n$primary: #123456;\n$dark: false;\n$loom-model: red;\n", "x")
    assert theme.primary == "#123456" and theme.dark is False
    assert theme.variables == {"loom-model": "red"}


async def test_switching_theme_is_remembered(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        assert app.theme == "loom-dark"
        app.set_theme("loom-light")
        await pilot.pause()
        assert app.theme_variables["loom-model"] == "#0550ae"
    assert load_prefs().theme == "loom-light"
    again = make_app()
    async with again.run_test(size=TERMINAL):
        assert again.theme == "loom-light"


async def test_user_themes_load_from_the_config_folder(make_app):
    folder = config_dir() / "themes"
    folder.mkdir(parents=True)
    (folder / "sepia.tcss").write_text(
        "$dark: false;\n$primary: #8b5a2b;\n$background: #f4ecd8;\n$loom-model: #5b3a1a;\n"
    )
    (folder / "broken.tcss").write_text("$background: #000;\n")  # no $primary
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        assert "sepia" in app.available_themes
        assert any("broken" in n.message for n in app._notifications)  # noqa: SLF001
        app.set_theme("sepia")
        await pilot.pause()
        assert app.theme_variables["loom-model"] == "#5b3a1a"


async def test_view_toggles_change_the_rendering_and_are_remembered(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await pilot.press("ctrl+g")
        await settle(pilot)
        view = app.view

        def styles():
            return [seg.style for seg in view.render_line(0)]

        plain = styles()
        await pilot.press("f5")  # token boundaries
        assert view.boundaries
        bounded = styles()
        assert len({s.bgcolor for s in bounded if s}) >= 2
        await pilot.press("f5", "f6")  # probability colouring
        assert view.probabilities and not view.boundaries
        assert styles() != plain
        await pilot.press("f7")
        assert not view.approx_marks
    prefs = load_prefs()
    assert prefs.probabilities and not prefs.boundaries and not prefs.approx


async def test_approximate_tokens_are_marked_until_refreshed(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "The quick brown fox jumps")
        await settle(pilot)
        # "Branch here": the edit of the writer's own text is a splice, not a retype.
        await pilot.press("ctrl+home", *["right"] * 3, "alt+i")
        await paste(pilot, " very")
        await settle(pilot)  # a fast splice: the suffix is re-roped, approximate
        assert not loom.is_exact(loom.cursor)
        italic = [seg for seg in app.view.render_line(0) if seg.style and seg.style.italic]
        assert italic
        await pilot.press("f8")
        await settle(pilot)
        assert loom.is_exact(loom.cursor)


async def test_a_key_map_remaps_actions(make_app, loom):
    (config_dir() / "keymap.toml").write_text('generate = "f9"\n[keys]\ntoggle_tree = "f10"\n')
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await pilot.press("f9")
        await settle(pilot)
        assert len(loom.cursor.tokens) == 12  # f9 generated
        await pilot.press("f10")
        await pilot.pause()
        assert app.branches.has_class("-hidden")
        assert "f9" in screen_text(app)  # the footer shows the new key


async def test_a_bad_key_map_is_reported_not_fatal(make_app):
    (config_dir() / "keymap.json").write_text(json.dumps({"generate": 5, "nonsense": "x"}))
    app = make_app()
    async with app.run_test(size=TERMINAL):
        assert any("key map" in n.message for n in app._notifications)  # noqa: SLF001


async def test_one_theme_command_and_only_loomterms_themes_bundled_first(make_app):
    from loomterm.tui.commands import LoomCommands, ThemeCommands

    folder = config_dir() / "themes"
    folder.mkdir(parents=True)
    (folder / "aaa-mine.tcss").write_text("$primary: #8b5a2b;\n")
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        names = app.looks.theme_names()
        assert names == ["loom-dark", "loom-high-contrast", "loom-light", "aaa-mine"]
        assert "textual-dark" not in app.available_themes and "nord" not in app.available_themes
        ours = [title for title, _, _ in LoomCommands(app.screen).commands()]
        system = [c.title for c in app.get_system_commands(app.screen)]
        assert (ours + system).count("Theme") == 1
        assert [t for t in ours if t.startswith("Theme: ")][0] == "Theme: loom-dark"
        # The Theme command lists them in that order.
        await app.run_action("change_theme")
        await pilot.pause(0.5)
        hits = [hit.text async for hit in ThemeCommands(app.screen).discover()]
        assert hits == names


def test_no_two_actions_share_a_key():
    """Each default key runs one action: branches that each claimed a free key met at
    merge time once (f3 was both the context dialog and the next model)."""
    from collections import Counter

    from loomterm.tui.keymap import ACTIONS
    from loomterm.tui.widgets.document_view import DocumentView

    keys = [k.strip() for a in ACTIONS for k in a.key.split(",") if k.strip()]
    keys += [b.key for b in DocumentView.BINDINGS]
    shared = sorted(key for key, count in Counter(keys).items() if count > 1)
    assert shared == []
