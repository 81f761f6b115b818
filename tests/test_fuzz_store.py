"""Every session file, however damaged, is read or refused in one line, and left as it was.

Two fuzzers over a real small session (written by the store itself): one changes its
bytes (flips, cuts, splices), the other its rows (token ids, alternatives blobs,
parents that make cycles or point nowhere, JSON columns, values of the wrong SQL type).
Each file then goes through ``loomterm export`` and ``loomterm sessions``, and through
the store's reader directly.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from loomterm.config.locations import sessions_dir
from loomterm.errors import SessionError
from loomterm.export import from_json_dict
from loomterm.store import load, write_session
from tests.fuzzing import FINGERPRINT, TEXT, assert_clean_end, budget, digest, run_cli


@pytest.fixture(scope="module")
def session_bytes(tmp_path_factory) -> bytes:
    """A small real session: a root, a prompt, two generated children with logprobs and
    alternatives, settings, a model table and a vocab entry; closed cleanly."""
    tree = {
        "format": "loomterm-tree",
        "version": 1,
        "model": {"name": "m", "source": "m", "fingerprint": FINGERPRINT},
        "models": {"m": {"name": "m", "kind": "local"}},
        "settings": {"temperature": 0.7},
        "cursor": 2,
        "nodes": [
            {"id": 0, "parent": None, "children": [1], "tokens": [], "pieces": []},
            {
                "id": 1,
                "parent": 0,
                "children": [2, 3],
                "origin": "user",
                "tokens": [10, 11],
                "pieces": ["Once", " upon"],
            },
            {
                "id": 2,
                "parent": 1,
                "origin": "model",
                "tokens": [12, 13],
                "pieces": [" a", " time"],
                "logprobs": [-0.5, "-inf"],
                "top": [[[12, -0.5], [99, -1.5]], None],
                "meta": {"model": "m", "bookmark": True},
                "seed": 4,
                "sampling": {"temperature": 0.7},
            },
            {"id": 3, "parent": 1, "origin": "edit", "tokens": [14], "pieces": ["!"]},
        ],
        "vocab": {"99": " there"},
    }
    path = tmp_path_factory.mktemp("store") / "base.loom"
    write_session(path, from_json_dict(tree)).close()
    return path.read_bytes()


def read_and_check(path: Path) -> None:
    """The reader, ``loomterm export`` and ``loomterm sessions`` on ``path``: each ends in
    success or one line, and the file's bytes are unchanged."""
    before = digest(path)
    try:
        load(path)
    except SessionError as exc:
        assert "\n" not in str(exc)
    code, _, err = run_cli(["export", str(path), "--format", "json"])
    assert_clean_end(code, err, allowed=(0, 1))
    code, out, err = run_cli(["sessions"])
    assert_clean_end(code, err, allowed=(0,))
    assert digest(path) == before


@st.composite
def byte_edits(draw, size: int) -> list[tuple[str, int, bytes]]:
    edits = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "splice", "zero"]))
        at = draw(st.integers(0, size - 1))
        edits.append((kind, at, draw(st.binary(min_size=1, max_size=64))))
    return edits


def apply_edits(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    buf = bytearray(data)
    for kind, at, blob in edits:
        at = min(at, max(len(buf) - 1, 0))
        if kind == "flip":
            buf[at : at + len(blob)] = bytes(b ^ x for b, x in zip(buf[at : at + len(blob)], blob))
        elif kind == "cut":
            del buf[at:]
        elif kind == "splice":
            buf[at:at] = blob
        else:
            buf[at : at + len(blob)] = bytes(len(blob[: len(buf) - at]))
    return bytes(buf)


@budget(150)
@given(data=st.data())
def test_damaged_bytes_are_read_or_refused_in_one_line(tmp_path, session_bytes, data):
    edits = data.draw(byte_edits(len(session_bytes)))
    path = sessions_dir() / "damaged.loom"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(apply_edits(session_bytes, edits))
    read_and_check(path)


# Values SQLite may hold in any column: every storage class, and values of the right
# class that are still wrong.
SQL_VALUES = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([-1, 2**31, 2**31 - 1, 2**53, 0, 1, 7, 99]),
    st.floats(allow_nan=False),  # SQLite stores NaN as NULL
    TEXT,
    st.sampled_from(['{"a": 1}', "[1]", "{", "null", "5", '"x"', '{"role": 5}', "[" * 2000]),
    st.binary(max_size=40),
)
COLUMNS = {
    "nodes": [
        "id",
        "parent",
        "position",
        "origin",
        "approx",
        "sampling",
        "seed",
        "created",
        "meta",
    ],
    "tokens": ["node", "idx", "token", "piece", "logprob", "top"],
    "vocab": ["token", "piece"],
    "session": ["value"],
}


HOISTS = ['{"node": 1}', '{"node": 99}', '{"node": -1}', '{"node": "1"}', '{"node": true}', "[]"]


@st.composite
def row_edits(draw) -> list[tuple[str, tuple]]:
    """SQL statements that change a few values, drop rows or make cycles."""
    statements = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(
            st.sampled_from(["value", "value", "value", "delete", "cycle", "orphan", "view"])
        )
        if kind == "value":
            table = draw(st.sampled_from(sorted(COLUMNS)))
            column = draw(st.sampled_from(COLUMNS[table]))
            key = "key" if table == "session" else "rowid" if table != "tokens" else "idx"
            where = draw(
                st.sampled_from(["format", "cursor", "settings", "model", "models", "created"])
                if table == "session"
                else st.integers(0, 4)
            )
            statements.append(
                (f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (draw(SQL_VALUES), where))
            )
        elif kind == "delete":
            table = draw(st.sampled_from(sorted(COLUMNS)))
            statements.append(
                (f"DELETE FROM {table} WHERE rowid % 2 = ?", (draw(st.integers(0, 1)),))
            )
        elif kind == "cycle":
            a, b = draw(st.integers(0, 3)), draw(st.integers(0, 3))
            statements.append(("UPDATE nodes SET parent = ? WHERE id = ?", (a, b)))
            statements.append(("UPDATE nodes SET parent = ? WHERE id = ?", (b, a)))
        elif kind == "view":  # a view key the editor keeps (the hoist), any value
            statements.append(
                (
                    "INSERT OR REPLACE INTO session(key, value) VALUES ('hoist', ?)",
                    (draw(st.one_of(SQL_VALUES, st.sampled_from(HOISTS))),),
                )
            )
        else:
            statements.append(
                (
                    "INSERT INTO nodes (id, parent, position, origin, created, meta) "
                    "VALUES (?, ?, 0, 'user', 0, '{}')",
                    (draw(st.integers(5, 2**40)), draw(st.integers(-2, 2**40))),
                )
            )
    return statements


@budget(200)
@given(statements=row_edits())
def test_damaged_rows_are_read_or_refused_in_one_line(tmp_path, session_bytes, statements):
    path = sessions_dir() / "rows.loom"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(session_bytes)
    conn = sqlite3.connect(path)
    try:
        for sql, params in statements:
            conn.execute(sql, params)
        conn.commit()
    except sqlite3.DatabaseError:  # a NOT NULL or key the schema itself refuses
        reject()
    finally:
        conn.close()
    read_and_check(path)


def test_a_cursor_inside_a_cycle_does_not_hang_the_listing(tmp_path, session_bytes, monkeypatch):
    """``loomterm sessions`` walks up from the cursor in SQL: two nodes that are each
    other's parent once made that walk endless."""
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(tmp_path))
    path = tmp_path / "sessions" / "cycle.loom"
    path.parent.mkdir()
    path.write_bytes(session_bytes)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE nodes SET parent = 3 WHERE id = 2")
        conn.execute("UPDATE nodes SET parent = 2 WHERE id = 3")
        conn.execute("UPDATE session SET value = '2' WHERE key = 'cursor'")
    conn.close()
    code, out, err = run_cli(["sessions"])
    assert code == 0 and "cycle" in out
    with pytest.raises(SessionError, match="not reachable"):
        load(path)


@pytest.mark.parametrize(
    "sql, field",
    [
        ("UPDATE tokens SET token = 1e300 WHERE idx = 0", "must be a token id"),
        ("UPDATE tokens SET top = x'0102' WHERE idx = 0 AND node = 2", "alternatives blob"),
        ('UPDATE nodes SET meta = \'{"merged_origins": "zz"}\' WHERE id = 2', "merged_origins"),
        ("UPDATE nodes SET origin = 'alien' WHERE id = 2", "origin must be"),
        ("UPDATE session SET value = '{' WHERE key = 'model'", "is not JSON"),
    ],
)
def test_each_bad_field_is_named(tmp_path, session_bytes, sql, field):
    path = tmp_path / "bad.loom"
    path.write_bytes(session_bytes)
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    conn.close()
    with pytest.raises(SessionError, match=field):
        load(path)


@pytest.mark.parametrize(
    "sql",
    [
        "PRAGMA user_version = 0",  # an older schema's number on today's tables
        "UPDATE nodes SET meta = CAST(x'ce41' AS TEXT) WHERE id = 2",  # not UTF-8
        "UPDATE session SET value = CAST(x'ff' AS TEXT) WHERE key = 'model'",
    ],
)
def test_what_the_ten_times_run_found_is_one_line(tmp_path, session_bytes, sql, monkeypatch):
    """Found by ``LOOMTERM_FUZZ_EXAMPLES=10``: a migration run over tables that are
    there already, and text columns holding bytes that are not UTF-8."""
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(tmp_path))
    path = tmp_path / "sessions" / "found.loom"
    path.parent.mkdir()
    path.write_bytes(session_bytes)
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    conn.close()
    read_and_check(path)
    with pytest.raises(SessionError):
        load(path)
