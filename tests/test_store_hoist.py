"""The hoist in the session file: the ``hoist`` key (a view, like the caret), how it
reads back, and that a bad one is dropped, never an error."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomterm.engine import Loom
from loomterm.sessions.session import close_session, record_hoist, save_loom, saved_hoist
from loomterm.store import hoisted, load
from tests.helpers import make_loom


@pytest.fixture
def loom(tiny_llama_dir) -> Iterator[Loom]:
    loom = make_loom(tiny_llama_dir)
    yield loom
    close_session(loom)


def info_row(path, key: str):
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT value FROM session WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])
    finally:
        conn.close()


def set_info(path, key: str, text: str) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT OR REPLACE INTO session(key, value) VALUES (?, ?)", (key, text))
        conn.commit()
    finally:
        conn.close()


def test_the_hoist_is_a_view_key_and_reads_back(loom, tmp_path):
    path = tmp_path / "hoist.loom"
    stem = loom.append(loom.root, "Once upon a time")
    loom.cursor = loom.append(stem, " there was a cat")
    save_loom(loom, path)
    modified = load(path).modified
    assert load(path).hoist is None and saved_hoist(loom) is None
    record_hoist(loom, stem.id)
    assert info_row(path, "hoist") == {"node": stem.id}
    data = load(path)
    assert data.hoist == stem.id
    assert data.modified == modified  # a hoist is no change of content
    assert saved_hoist(loom) == stem.id
    record_hoist(loom, None)
    assert load(path).hoist is None and saved_hoist(loom) is None


@pytest.mark.parametrize(
    "text", ['{"node": 999}', '{"node": -3}', '{"node": "1"}', '{"node": 1.5}', "[1]", "7", "null"]
)
def test_a_bad_or_stale_hoist_is_dropped(loom, tmp_path, text):
    """(A value that is not JSON at all is refused in one line, as any session value
    is: ``test_fuzz_store`` writes such hoists too.)"""
    path = tmp_path / "hoist.loom"
    loom.cursor = loom.append(loom.root, "Once upon a time")
    save_loom(loom, path)
    set_info(path, "hoist", text)
    assert load(path).hoist is None  # the rest of the session reads as before
    assert load(path).path_text() == "Once upon a time"
    assert saved_hoist(loom) is None


SCALAR = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3)
VALUES = SCALAR | st.lists(SCALAR, max_size=2) | st.fixed_dictionaries({"node": SCALAR})


@settings(suppress_health_check=[HealthCheck.too_slow])  # a shared machine's slow moments
@given(value=VALUES)
def test_hoisted_reads_any_value_as_a_node_id_or_none(value):
    node = hoisted(value)
    assert node is None or (type(node) is int and node >= 0 and node == value["node"])
