"""The user's own files: a key map, theme files and the editor's preferences, fuzzed.

Each is read into something the editor can use, or refused with one line that names
the file (the editor shows it as a notification and goes on); the file is only read.
"""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from loomterm.config.keymap import KeymapError, load_keymap
from loomterm.config.locations import config_dir
from loomterm.tui.prefs import Prefs, load_prefs, prefs_path
from loomterm.tui.themes import BASE_COLOURS, LOOM_DEFAULTS, ThemeFileError, load_theme_file
from tests.fuzzing import HOSTILE, TEXT, budget, digest, dumps

ACTION_IDS = ["generate", "help", "quit", "tree", "undo", "nope", ""]
KEYS = st.sampled_from(["ctrl+g", "f5", "alt+g,ctrl+x", "+", "ctrl+", "", " ", "a b", "ctrl++"])


@st.composite
def keymap_texts(draw) -> tuple[str, bytes]:
    """A key map file's suffix and bytes: near-valid JSON or TOML, or garbage."""
    table = draw(st.dictionaries(st.sampled_from(ACTION_IDS) | TEXT, KEYS | HOSTILE, max_size=4))
    kind = draw(st.sampled_from(["json", "json-keys", "toml", "garbage", "deep", "not-a-table"]))
    if kind == "json":
        return ".json", dumps(table).encode()
    if kind == "json-keys":
        return ".json", dumps({"keys": table | {"x": draw(HOSTILE)}}).encode()
    if kind == "toml":
        lines = [
            f"{json.dumps(str(k))} = {json.dumps(v) if isinstance(v, str) else 5}"
            for k, v in table.items()
        ]
        return ".toml", ("[keys]\n" + "\n".join(lines)).encode()
    if kind == "deep":
        return ".json", b'{"a":' * 5000 + b"1" + b"}" * 5000
    if kind == "not-a-table":
        return ".json", dumps(draw(HOSTILE)).encode()
    return draw(st.sampled_from([".json", ".toml"])), draw(st.binary(max_size=80))


@budget(300)
@given(case=keymap_texts())
def test_a_key_map_is_used_or_refused_in_one_line(tmp_path, case):
    suffix, data = case
    path = tmp_path / f"keymap{suffix}"
    path.write_bytes(data)
    before = digest(path)
    try:
        keymap = load_keymap(path)
    except KeymapError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    else:
        assert all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in keymap.items()
        )
    assert digest(path) == before


COLOURS = st.sampled_from(
    ["#123456", "#fff", "red", "rgb(1,2,3)", "$primary", "$foreground 40%", "#102030 50%"]
)
BAD_COLOURS = st.sampled_from(
    ["nope", "#12345", "rgb(1,2)", "$", "50%", "red 50%", "#fff 50", "\x1b[31m", "url(x)", ""]
)
NAMES = st.sampled_from([*BASE_COLOURS, *LOOM_DEFAULTS, "dark", "other"])


@st.composite
def theme_texts(draw) -> bytes:
    lines = [
        f"${n}: {v};"
        for n, v in draw(st.lists(st.tuples(NAMES, COLOURS | BAD_COLOURS | TEXT), max_size=8))
    ]
    if draw(st.booleans()):
        lines.insert(0, f"$primary: {draw(COLOURS | BAD_COLOURS)};")
    text = "\n".join(lines).encode()
    if draw(st.integers(0, 5)) == 0:
        text = draw(st.binary(max_size=60)) + text
    return text


@budget(300)
@given(data=theme_texts())
def test_a_theme_file_is_a_theme_or_one_line(tmp_path, data):
    """A theme that loads also builds its colours (what Textual does when it is used)."""
    path = tmp_path / "mine.tcss"
    path.write_bytes(data)
    before = digest(path)
    try:
        theme = load_theme_file(path)
    except ThemeFileError as exc:
        assert "\n" not in str(exc)
    else:
        theme.to_color_system().generate()
    assert digest(path) == before


@budget(200)
@given(
    data=st.dictionaries(st.sampled_from(list(Prefs.__dataclass_fields__)) | TEXT, HOSTILE)
    | HOSTILE
)
def test_the_preferences_file_never_stops_the_editor(data):
    path = prefs_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(data), encoding="utf-8")
    prefs = load_prefs()
    assert isinstance(prefs.theme, str)
    assert math.isfinite(prefs.tree_share) and 0 <= prefs.tree_share <= 1


def test_nested_preferences_are_ignored():
    path = config_dir() / "tui.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[" * 10_000 + "]" * 10_000)
    assert load_prefs() == Prefs()
