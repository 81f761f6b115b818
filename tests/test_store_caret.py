"""The caret in the session file: the ``caret`` key beside the cursor, how it reads back,
and how files without it (or with a bad one) open."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator

import pytest

from loomterm.engine import Loom
from loomterm.engine.text import PieceMaker
from loomterm.sessions.session import (
    Session,
    close_session,
    import_session,
    record_caret,
    retokenized,
    save_loom,
    saved_caret,
    session_of,
)
from loomterm.store import SCHEMA_VERSION, Caret, SessionStore, check_file, load
from tests.helpers import caret_writes, make_loom


@pytest.fixture
def loom(tiny_llama_dir) -> Iterator[Loom]:
    loom = make_loom(tiny_llama_dir)
    yield loom
    close_session(loom)


def two_nodes(loom: Loom):
    stem = loom.append(loom.root, "Once upon a time")
    leaf = loom.append(stem, " there was a cat")
    loom.cursor = leaf
    return stem, leaf


def info_row(path, key: str):
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT value FROM session WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])
    finally:
        conn.close()


def set_info(path, key: str, value) -> None:
    conn = sqlite3.connect(path)
    try:
        if value is None:
            conn.execute("DELETE FROM session WHERE key = ?", (key,))
        else:
            conn.execute(
                "INSERT OR REPLACE INTO session(key, value) VALUES (?, ?)", (key, json.dumps(value))
            )
        conn.commit()
    finally:
        conn.close()


def test_the_caret_is_a_key_beside_the_cursor_and_reads_back(loom, tmp_path):
    path = tmp_path / "caret.loom"
    _, leaf = two_nodes(loom)
    save_loom(loom, path)
    assert load(path).caret is None  # nothing recorded yet: the caret goes to the end
    modified = load(path).modified

    record_caret(loom, leaf, 7)
    data = load(path)  # read while the writer holds the file (through its log)
    assert data.caret == Caret(leaf.id, 7)
    assert data.cursor == leaf.id
    assert data.modified == modified  # a caret is no change of content
    close_session(loom)

    assert info_row(path, "caret") == {"node": leaf.id, "char": 7}
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 1
    conn.close()
    assert check_file(path) == SCHEMA_VERSION  # no new schema version for the key


def test_a_reopened_session_gives_the_caret_of_its_cursor_only(loom, tiny_llama_dir, tmp_path):
    path = tmp_path / "caret.loom"
    stem, leaf = two_nodes(loom)
    save_loom(loom, path)
    record_caret(loom, leaf, 5)
    close_session(loom)

    session = Session.open(path, model=str(tiny_llama_dir), device="cpu")
    again = session.loom
    try:
        assert again.cursor.id == leaf.id
        assert saved_caret(again, again.cursor) == 5
        assert saved_caret(again, again.tree.nodes[stem.id]) is None  # not recorded there
        # At the end is recorded as "the end", however long the path grows since.
        record_caret(again, again.cursor, None)
        assert load(path).caret == Caret(leaf.id, None)
        assert saved_caret(again, again.cursor) is None
    finally:
        close_session(again)


def test_the_same_caret_is_not_written_twice(loom, tmp_path):
    path = tmp_path / "caret.loom"
    _, leaf = two_nodes(loom)
    save_loom(loom, path)
    store = session_of(loom).recorder.store
    writes = caret_writes(store)
    for _ in range(3):
        record_caret(loom, leaf, 4)
    record_caret(loom, leaf, 9)
    assert writes == [Caret(leaf.id, 4), Caret(leaf.id, 9)]
    assert load(path).caret == Caret(leaf.id, 9)


def test_a_file_without_the_key_opens_with_no_caret(loom, tiny_llama_dir, tmp_path):
    """A file of an older loomterm (no ``caret`` key) opens as before."""
    path = tmp_path / "old.loom"
    _, leaf = two_nodes(loom)
    save_loom(loom, path)
    record_caret(loom, leaf, 3)
    close_session(loom)
    set_info(path, "caret", None)
    assert info_row(path, "caret") is None
    assert load(path).caret is None
    session = Session.open(path, model=str(tiny_llama_dir), device="cpu")
    try:
        assert saved_caret(session.loom, session.loom.cursor) is None
    finally:
        session.close()


@pytest.mark.parametrize(
    "value, expected",
    [
        ("7", None),
        ([1, 2], None),
        ({"node": "1", "char": 3}, None),
        ({"node": True, "char": 3}, None),
        ({"char": 3}, None),
        ({"node": 1, "char": 2.5}, None),
        ({"node": 1, "char": -4}, Caret(1, 0)),
        ({"node": 1, "char": 10**9}, Caret(1, 10**9)),  # clamped by the editor, on open
        ({"node": 1}, Caret(1, None)),
    ],
)
def test_a_bad_caret_is_dropped_never_an_error(value, expected, loom, tmp_path):
    path = tmp_path / "bad.loom"
    two_nodes(loom)
    save_loom(loom, path)
    close_session(loom)
    set_info(path, "caret", value)
    assert check_file(path) == SCHEMA_VERSION  # the file is not called damaged
    assert load(path).caret == expected
    SessionStore.open(path).close()


def test_retokenizing_and_importing_keep_the_caret(loom, tmp_path):
    """A character offset reads the same whatever the tokens: kept through a
    re-tokenization and an import (``write_session``)."""
    path = tmp_path / "caret.loom"
    _, leaf = two_nodes(loom)
    save_loom(loom, path)
    record_caret(loom, leaf, 11)
    close_session(loom)
    data = load(path)
    loaded = loom.runner.loaded
    pieces = PieceMaker.for_tokenizer(loaded.tokenizer)
    assert retokenized(data, loaded, pieces).caret == Caret(leaf.id, 11)
    copy = import_session(data, tmp_path / "copy.loom")
    assert copy.caret == Caret(leaf.id, 11)
