"""The session file: what it keeps, how it streams, and how it refuses bad files."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomterm import store as store_mod
from loomterm.errors import SessionError
from loomterm.session import (
    FLUSH_INTERVAL,
    close_session,
    list_sessions,
    resolve_session,
    save_loom,
    session_path,
)
from loomterm.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    SessionLockedError,
    SessionStore,
    load,
    pack_top,
    unpack_top,
)
from loomterm.tree import Origin
from tests.fake_loom import FakeLoom, sample_tree, tree_record

REPO = Path(__file__).resolve().parents[1]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def saved_sample(tmp_path: Path) -> tuple[FakeLoom, Path]:
    loom = sample_tree()
    path = tmp_path / "sample.loom"
    save_loom(loom, path)
    close_session(loom)
    return loom, path


# -- what the file keeps --------------------------------------------------------------


def test_save_and_load_keep_every_field(tmp_path):
    loom, path = saved_sample(tmp_path)
    data = load(path)
    assert tree_record(data.tree) == tree_record(loom.tree)
    assert data.cursor == loom.cursor.id
    assert data.settings == loom.settings
    assert data.model["fingerprint"] == loom.loaded.fingerprint
    assert data.model["name"] == "fake-bytes"
    assert data.tree._next_id == loom.tree._next_id
    for node in loom.tree.nodes.values():
        assert data.text(node) == loom.decode(node.tokens) or node.tokens == []
    assert data.path_text() == loom.text(loom.cursor)
    assert data.vocab  # alternatives' display text is kept
    assert data.name == "sample"


def test_schema_is_versioned_with_a_migration_path(tmp_path):
    _, path = saved_sample(tmp_path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert len(MIGRATIONS) == SCHEMA_VERSION


def test_an_older_schema_is_migrated_with_a_backup(tmp_path, monkeypatch):
    loom, path = saved_sample(tmp_path)
    before = sha(path)

    def add_colour(conn):
        conn.execute("ALTER TABLE nodes ADD COLUMN colour TEXT")

    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(store_mod, "MIGRATIONS", [*MIGRATIONS, add_colour])
    # A reader migrates a copy in memory and leaves the file alone.
    assert tree_record(load(path).tree) == tree_record(loom.tree)
    assert sha(path) == before
    # A writer upgrades the file, keeping the old one beside it.
    SessionStore.open(path).close()
    assert sha(path.with_name(f"{path.name}.v{SCHEMA_VERSION}.bak")) == before
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert "colour" in [row[1] for row in conn.execute("PRAGMA table_info(nodes)")]
    conn.close()


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**31 - 1),
            st.floats(allow_nan=False, width=64),
        ),
        max_size=12,
    )
    | st.none()
)
def test_alternatives_pack_exactly(top):
    assert unpack_top(pack_top(top)) == top


# -- streaming ------------------------------------------------------------------------


def test_every_change_reaches_the_file_as_it_happens(tmp_path):
    loom = FakeLoom()
    path = tmp_path / "live.loom"
    save_loom(loom, path)
    prompt = loom.append(loom.root, "Hello")
    assert tree_record(load(path).tree) == tree_record(loom.tree)
    loom.cursor = prompt
    assert load(path).cursor == prompt.id
    loom.update_settings(temperature=0.3)
    assert load(path).settings["temperature"] == 0.3
    prompt.meta["bookmark"] = True
    loom.emit("update", prompt)
    assert load(path).tree.nodes[prompt.id].meta == {"bookmark": True}
    reply = loom.start_generation(prompt)
    loom.grow(reply, " world, and all who live in it")
    loom.emit("done", reply)
    assert tree_record(load(path).tree) == tree_record(loom.tree)
    head = loom.split(reply, 6)
    data = load(path)
    assert tree_record(data.tree) == tree_record(loom.tree)
    assert data.text(head) + data.text(reply) == " world, and all who live in it"
    close_session(loom)


def test_generated_tokens_reach_disk_within_half_a_second(tmp_path):
    loom = FakeLoom()
    path = tmp_path / "stream.loom"
    save_loom(loom, path)
    node = loom.start_generation(loom.root)
    loom.grow(node, "abc")  # then the model goes quiet: no more events
    time.sleep(FLUSH_INTERVAL + 0.3)
    assert load(path).tree.nodes[node.id].tokens == list(b"abc")
    # A steady stream is written at least every half second, not only at the end.
    start = time.monotonic()
    while time.monotonic() - start < 1.2:
        loom.grow(node, "x")
        time.sleep(0.01)
    on_disk = len(load(path).tree.nodes[node.id].tokens)
    assert on_disk >= len(node.tokens) - int(FLUSH_INTERVAL / 0.01) - 5
    close_session(loom)
    assert load(path).tree.nodes[node.id].tokens == node.tokens


def test_a_character_split_across_flushes_keeps_its_text(tmp_path):
    loom = FakeLoom()
    path = tmp_path / "utf8.loom"
    save_loom(loom, path)
    node = loom.start_generation(loom.root)
    loom.grow(node, "caf")
    encoded = "\u00e9!".encode()
    node.tokens.append(encoded[0])
    node.logprobs.append(None)
    node.top.append(None)
    loom.emit("tokens", node)
    loom.emit("done", node)  # flush with half a character at the end
    for byte in encoded[1:]:
        node.tokens.append(byte)
        node.logprobs.append(None)
        node.top.append(None)
        loom.emit("tokens", node)
    loom.emit("done", node)
    assert load(path).path_text(node) == "caf\u00e9!"
    close_session(loom)


CRASHER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from loomterm.session import save_loom
    from tests.fake_loom import FakeLoom
    loom = FakeLoom()
    save_loom(loom, {path!r})
    node = loom.start_generation(loom.root)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.5:
        loom.grow(node, "z")
        time.sleep(0.005)
    print(len(node.tokens), flush=True)
    os.kill(os.getpid(), 9)   # crash: no close, no atexit
    """
)


def test_a_crash_loses_at_most_half_a_second_and_releases_the_lock(tmp_path):
    path = tmp_path / "crash.loom"
    proc = subprocess.run(
        [sys.executable, "-c", CRASHER.format(repo=str(REPO), path=str(path))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    generated = int(proc.stdout.strip())
    kept = len(load(path).tree.nodes[1].tokens)
    rate = generated / 1.5
    assert kept >= generated - rate * FLUSH_INTERVAL - 10
    # The dead process's lock went with it.
    SessionStore.open(path).close()


# -- refusing bad files ---------------------------------------------------------------


def _assert_refused(path: Path, match: str) -> None:
    before = sha(path)
    for attempt in (lambda: load(path), lambda: SessionStore.open(path)):
        with pytest.raises(SessionError, match=match) as info:
            attempt()
        assert "\n" not in str(info.value)
        assert sha(path) == before
    assert not path.with_name(path.name + "-wal").exists()


def test_garbage_is_refused_untouched(tmp_path):
    path = tmp_path / "garbage.loom"
    path.write_bytes(os.urandom(5000))
    _assert_refused(path, "not an SQLite database")


def test_an_empty_file_is_refused_untouched(tmp_path):
    path = tmp_path / "empty.loom"
    path.write_bytes(b"")
    _assert_refused(path, "empty")


def big_session(tmp_path: Path) -> Path:
    loom = FakeLoom()
    path = tmp_path / "big.loom"
    save_loom(loom, path)
    node = loom.root
    for i in range(60):
        node = loom.append(node, f"paragraph {i} " + "lorem ipsum dolor sit amet " * 20)
    close_session(loom)
    return path


def test_a_truncated_file_is_refused_untouched(tmp_path):
    path = big_session(tmp_path)
    data = path.read_bytes()
    assert len(data) > 40_000
    path.write_bytes(data[: len(data) // 2])
    _assert_refused(path, "not a readable loomterm session")


def test_a_damaged_page_is_refused_untouched(tmp_path):
    path = big_session(tmp_path)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 3000] = random.Random(0).randbytes(3000)  # fixed: repeatable
    path.write_bytes(bytes(data))
    _assert_refused(path, "not a readable loomterm session")


def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path):
    path = tmp_path / "other.loom"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    _assert_refused(path, "not a loomterm session")


def test_a_newer_schema_is_refused_untouched(tmp_path):
    _, path = saved_sample(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.commit()
    conn.close()
    _assert_refused(path, "newer loomterm")


HOLDER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {repo!r})
    from loomterm.store import SessionStore
    store = SessionStore.open({path!r})
    print("locked", flush=True)
    time.sleep(60)
    """
)


def test_a_session_in_use_is_refused_but_readable(tmp_path):
    _, path = saved_sample(tmp_path)
    before = sha(path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(repo=str(REPO), path=str(path))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(
            SessionLockedError, match=f"in use by another loomterm \\(pid {holder.pid}\\)"
        ) as info:
            SessionStore.open(path)
        assert "\n" not in str(info.value)
        assert load(path).cursor  # a read-only view still works
        assert sha(path) == before
    finally:
        holder.kill()
        holder.wait()
    SessionStore.open(path).close()


def test_the_same_process_cannot_open_twice_for_writing(tmp_path):
    _, path = saved_sample(tmp_path)
    first = SessionStore.open(path)
    with pytest.raises(SessionLockedError):
        SessionStore.open(path)
    first.close()
    SessionStore.open(path).close()


def test_saving_over_a_foreign_file_is_refused(tmp_path):
    path = tmp_path / "notes.loom"
    path.write_text("my notes")
    with pytest.raises(SessionError):
        save_loom(FakeLoom(), path)
    assert path.read_text() == "my notes"


# -- names ----------------------------------------------------------------------------


def test_names_resolve_under_the_sessions_folder_with_close_matches():
    loom = sample_tree()
    save_loom(loom, "story")
    close_session(loom)
    assert resolve_session("story") == session_path("story")
    assert resolve_session("story").parent.name == "sessions"
    with pytest.raises(SessionError, match="close matches: story"):
        resolve_session("stroy")
    with pytest.raises(SessionError, match="no session named 'zzz'"):
        resolve_session("zzz")


def test_list_sessions_reports_each_file():
    loom = sample_tree()
    save_loom(loom, "one")
    close_session(loom)
    session_path("broken").write_bytes(b"nope")
    rows = {row.name: row for row in list_sessions()}
    one = rows["one"]
    assert one.model == "fake-bytes"
    assert one.nodes == len(loom.tree.nodes)
    assert one.path_tokens == len(loom.cursor.path_tokens())
    assert one.modified > 0 and one.error is None
    assert rows["broken"].error


def test_origin_values_survive(tmp_path):
    loom, path = saved_sample(tmp_path)
    origins = {Origin(n.origin) for n in load(path).tree.nodes.values()}
    assert {Origin.ROOT, Origin.USER, Origin.MODEL, Origin.EDIT} <= origins


def test_save_again_flushes_and_save_as_moves_the_session(tmp_path):
    loom = sample_tree()
    first = tmp_path / "first.loom"
    recorder = save_loom(loom, first)
    assert save_loom(loom, first) is recorder  # same file: just a flush
    second = tmp_path / "second.loom"
    save_loom(loom, second)
    assert recorder.closed
    SessionStore.open(first).close()  # the old file is free again
    loom.append(loom.root, "only in the second")
    assert len(load(second).tree.nodes) == len(loom.tree.nodes)
    assert len(load(first).tree.nodes) == len(loom.tree.nodes) - 1
    close_session(loom)


def test_a_failing_disk_does_not_break_generation_and_is_reported(tmp_path, monkeypatch):
    loom = FakeLoom()
    recorder = save_loom(loom, tmp_path / "full.loom")
    node = loom.start_generation(loom.root)

    def disk_full(*args, **kwargs):
        raise SessionError("cannot write session full.loom: database or disk is full")

    monkeypatch.setattr(recorder.store, "append_tokens", disk_full)
    with pytest.warns(UserWarning, match="no longer being saved"):
        loom.grow(node, "abc")
        loom.emit("done", node)
    loom.grow(node, "def")  # generation carries on
    with pytest.raises(SessionError, match="disk is full"):
        recorder.flush()
    with pytest.raises(SessionError, match="disk is full"):
        close_session(loom)
    SessionStore.open(tmp_path / "full.loom").close()  # released all the same
