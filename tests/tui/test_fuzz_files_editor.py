"""The editor starts whatever the user's files and an imported tree hold: a bad key
map, theme or preferences file is one notification each; never a traceback."""

from __future__ import annotations

import json

import pytest

from loomterm.config.locations import config_dir
from tests.fuzzing import assert_clean_end, digest, dumps, run_cli
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


# One field of a real session's JSON tree changed: what the red team sent.
ONE_BAD_FIELD = [
    ("tokens", 0, 2**31 - 1),  # an id the model does not have
    ("tokens", 0, "<1e999>"),
    ("meta", None, {"merged_origins": "zz"}),
    ("meta", None, {"model": [1], "role": 5}),
    ("meta", None, {"bookmark": "a label", "tags": ["x"], "mine": {"deep": [1]}}),
    ("sampling", None, {"temperature": "hot"}),
    ("seed", None, 2**70),
    ("logprobs", 0, 1e300),
    ("top", 0, [[5, "-inf"], [6, -1.0]]),
    ("created", None, -1e18),
    ("origin", None, "alien"),
    ("approx", None, "yes"),
]


@pytest.mark.parametrize("field, index, value", ONE_BAD_FIELD)
async def test_an_imported_tree_with_one_bad_field_never_crashes_the_editor(
    loom, make_app, tiny_llama_dir, tmp_path, field, index, value
):
    """Imported, the tree is refused in one line, or the session opens and the editor
    runs on it (a model read and a generation included) and quits cleanly."""
    from loomterm import export
    from loomterm.errors import SessionError
    from loomterm.sessions.session import close_session, load_session, open_loom, save_loom

    prompt = loom.append(loom.root, "Once upon a time")
    (kid,) = loom.generate(prompt, 4, temperature=0)
    loom.cursor = kid
    save_loom(loom, "good")
    close_session(loom)
    obj = json.loads(export.render(load_session("good"), "json"))
    node = obj["nodes"][-1]
    if index is None:
        node[field] = value
    else:
        node[field][index] = value
    source = tmp_path / "bad.json"
    source.write_text(dumps(obj))
    before = digest(source)
    code, out, err = run_cli(["import", str(source), "--name", "bad"])
    assert_clean_end(code, err, allowed=(0, 1))
    assert digest(source) == before
    if code == 1:
        return
    try:
        opened = open_loom("bad", model=str(tiny_llama_dir))
    except SessionError as exc:  # refused when the model meets it: one line
        assert "\n" not in str(exc) and field == "tokens"
        return
    app = make_app(opened, session_name="bad")
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await pilot.press("end")
        await pilot.press("ctrl+g")  # generate from the imported text
        await settle(pilot, timeout=60)
        await pilot.press("up", "down")
        await settle(pilot)
    assert app.return_code in (0, None)
    close_session(opened)
