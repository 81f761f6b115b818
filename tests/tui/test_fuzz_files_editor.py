"""The editor starts whatever the user's files and an imported tree hold: a bad key
map, theme or preferences file is one notification each; never a traceback."""

from __future__ import annotations

import json

from loomterm.locations import config_dir
from tests.tui.conftest import TERMINAL, settle


async def test_garbage_user_files_are_notifications(make_app):
    config = config_dir()
    (config / "themes").mkdir(parents=True)
    (config / "themes" / "bad.tcss").write_text("$primary: #123456;\n$loom-model: banana;\n")
    (config / "themes" / "worse.tcss").write_bytes(b"\xff\xfe$primary: nope;")
    (config / "tui.json").write_text(json.dumps({"tree_share": 1e308, "theme": ["x"]}))
    (config / "keymap.json").write_text(json.dumps([1, 2, 3]))
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        messages = [n.message for n in app._notifications]  # noqa: SLF001
        assert any("bad" in m and "$loom-model is not a colour" in m for m in messages)
        assert any("worse" in m for m in messages)
        assert any("key map" in m for m in messages)
        assert all("\n" not in m for m in messages)
        assert "bad" not in app.available_themes
    assert app.return_code in (0, None)


async def test_odd_but_valid_keys_in_a_key_map_start_the_editor(make_app):
    config = config_dir()
    config.mkdir(parents=True, exist_ok=True)
    keys = {"generate": "+", "help": "ctrl+shift+alt+f12", "quit": "\u00e9", "tree": "f5, f6"}
    (config / "keymap.json").write_text(json.dumps(keys))
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await pilot.press("f6")
        await settle(pilot)
    assert app.return_code in (0, None)
