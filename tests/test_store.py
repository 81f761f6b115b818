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
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomterm.engine import Loom
from loomterm.engine.events import Event
from loomterm.errors import SessionError
from loomterm.sessions.session import (
    FLUSH_INTERVAL,
    close_session,
    list_sessions,
    resolve_session,
    save_loom,
    session_of,
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
from loomterm.store import schema as schema_mod
from loomterm.tree import Origin
from tests.helpers import ends_whole, make_loom, sample_tree, tree_record

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def loom(tiny_llama_dir) -> Iterator[Loom]:
    """A fresh loom on the tiny seeded Llama (it loads in milliseconds)."""
    loom = make_loom(tiny_llama_dir)
    yield loom
    close_session(loom)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def saved_sample(loom: Loom, tmp_path: Path) -> tuple[Loom, Path]:
    sample_tree(loom)
    path = tmp_path / "sample.loom"
    save_loom(loom, path)
    close_session(loom)
    return loom, path


# -- what the file keeps --------------------------------------------------------------


def test_save_and_load_keep_every_field(loom, tmp_path):
    loom, path = saved_sample(loom, tmp_path)
    data = load(path)
    assert tree_record(data.tree) == tree_record(loom.tree)
    assert data.cursor == loom.cursor.id
    assert data.settings == loom.settings.as_dict()
    assert data.model["fingerprint"] == loom.runner.loaded.fingerprint
    assert data.model["name"] == loom.runner.loaded.name
    assert data.tree._next_id == loom.tree._next_id
    for node in loom.tree.nodes.values():
        assert data.text(node) == loom.decode(node.tokens) or node.tokens == []
    assert data.path_text() == loom.text(loom.cursor)
    assert data.vocab  # alternatives' display text is kept
    assert data.name == "sample"


def test_schema_is_versioned_with_a_migration_path(loom, tmp_path):
    _, path = saved_sample(loom, tmp_path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert len(MIGRATIONS) == SCHEMA_VERSION


def test_an_older_schema_is_migrated_with_a_backup(loom, tmp_path, monkeypatch):
    loom, path = saved_sample(loom, tmp_path)
    before = sha(path)

    def add_colour(conn):
        conn.execute("ALTER TABLE nodes ADD COLUMN colour TEXT")

    monkeypatch.setattr(schema_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(schema_mod, "MIGRATIONS", [*MIGRATIONS, add_colour])
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


@pytest.fixture
def ieee_floats():
    """Subnormal floats as IEEE-754 has them, for one test. Building a Loom on the CPU
    flushes them to zero on its thread (for speed); an exactness check cannot run like
    that, and hypothesis refuses to draw floats."""
    flushing = sys.float_info.min / 2 == 0.0
    torch.set_flush_denormal(False)
    yield
    torch.set_flush_denormal(flushing)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # set once, for all
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
def test_alternatives_pack_exactly(ieee_floats, top):
    assert unpack_top(pack_top(top)) == top


# -- streaming ------------------------------------------------------------------------


def test_every_change_reaches_the_file_as_it_happens(loom, tmp_path):
    path = tmp_path / "live.loom"
    save_loom(loom, path)
    prompt = loom.append(loom.root, "Hello")
    assert tree_record(load(path).tree) == tree_record(loom.tree)
    loom.cursor = prompt
    assert load(path).cursor == prompt.id
    loom.update_settings(temperature=0.3)
    assert load(path).settings["temperature"] == 0.3
    prompt.meta["bookmark"] = True
    loom.notify(Event.UPDATE, prompt)  # how the app changes meta (loomterm.tui.ops.set_meta)
    assert load(path).tree.nodes[prompt.id].meta == {"bookmark": True}
    reply = loom.generate(prompt, 12, temperature=0.7, seed=8)[0]
    assert len(reply.tokens) == 12 and ends_whole(loom, reply)
    assert tree_record(load(path).tree) == tree_record(loom.tree)
    head = loom.truncate(reply, prompt.end + 6)
    assert head is not reply  # it split the reply
    data = load(path)
    assert tree_record(data.tree) == tree_record(loom.tree)
    assert data.text(head) + data.text(reply) == loom.decode(head.tokens + reply.tokens)
    assert data.path_text(reply) == loom.text(reply)
    close_session(loom)


def test_generated_tokens_reach_disk_within_half_a_second(loom, tmp_path):
    path = tmp_path / "stream.loom"
    # The plain continuation of this prompt runs long without an end token; a healed one
    # (" time" spelled again) ends within a second on the tiny model.
    loom.update_settings(token_healing="off")
    prompt = loom.append(loom.root, "Once upon a time")
    save_loom(loom, path)
    seen: dict[str, object] = {}
    cancel = threading.Event()

    def on_token(node, token, piece):
        # Runs as each token arrives, before the engine announces it.
        if len(node.tokens) == 4:
            # Three tokens announced, then the model goes quiet: no more events.
            time.sleep(FLUSH_INTERVAL + 0.3)
            seen["quiet"] = (load(path).tree.nodes[node.id].tokens, list(node.tokens))
            seen["start"] = time.monotonic()
        elif len(node.tokens) > 4:
            # A steady stream is written at least every half second, not only at the end.
            time.sleep(0.01)
            if time.monotonic() - seen["start"] >= 1.2:
                on_disk = len(load(path).tree.nodes[node.id].tokens)
                seen["stream"] = (on_disk, len(node.tokens))
                cancel.set()

    node = loom.generate(prompt, 1000, temperature=0.0, on_token=on_token, cancel=cancel)[0]
    on_disk, tokens = seen["quiet"]
    assert len(on_disk) >= 3 and on_disk == tokens[: len(on_disk)]
    on_disk, generated = seen["stream"]
    assert on_disk >= generated - int(FLUSH_INTERVAL / 0.01) - 5
    close_session(loom)
    assert load(path).tree.nodes[node.id].tokens == node.tokens


def test_a_character_split_across_flushes_keeps_its_text(loom, tmp_path):
    path = tmp_path / "utf8.loom"
    prompt = loom.append(loom.root, "Caf\u00e9 \u65e5\u672c \U0001f600")
    save_loom(loom, path)
    flushes = []

    def flush_each_token(node, token, piece):
        # Write what was announced so far, and this token: the first bytes of a
        # character reach the file before the token that completes it.
        session_of(loom).flush()
        flushes.append(len(load(path).tree.nodes[node.id].tokens))

    node = loom.generate(prompt, 16, temperature=0.7, seed=6, on_token=flush_each_token)[0]
    assert flushes[-1] == len(node.tokens) == 16
    pieces = loom.token_pieces(loom.tokens(node))[prompt.end :]

    def mid_character(k: int) -> bool:
        """The first ``k`` tokens end inside a character that the next ones complete."""
        following = next((p for p in pieces[k:] if p), "")
        return k > 0 and pieces[k - 1] == "" and following[:1] not in ("", "\ufffd")

    assert any(mid_character(k) for k in flushes), "the seed no longer splits a character"
    assert ends_whole(loom, node)
    assert load(path).path_text(node) == loom.text(node)
    close_session(loom)


CRASHER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from loomterm.sessions.session import save_loom
    from tests.helpers import make_loom
    loom = make_loom({model!r})
    loom.update_settings(token_healing="off")  # the plain continuation runs long, no end
    prompt = loom.append(loom.root, "Once upon a time")
    save_loom(loom, {path!r})
    started = []

    def on_token(node, token, piece):
        if not started:
            started.append(time.monotonic())
        time.sleep(0.005)
        if time.monotonic() - started[0] >= 1.5:
            print(node.id, len(node.tokens), flush=True)
            os.kill(os.getpid(), 9)   # crash: no close, no atexit

    loom.generate(prompt, 1500, temperature=0.0, on_token=on_token)
    print("the generation ended before the crash", file=sys.stderr)
    """
)


def test_a_crash_loses_at_most_half_a_second_and_releases_the_lock(tiny_llama_dir, tmp_path):
    path = tmp_path / "crash.loom"
    code = CRASHER.format(repo=str(REPO), model=str(tiny_llama_dir), path=str(path))
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    node_id, generated = map(int, proc.stdout.split())
    kept = len(load(path).tree.nodes[node_id].tokens)
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


def big_session(loom: Loom, tmp_path: Path) -> Path:
    path = tmp_path / "big.loom"
    save_loom(loom, path)
    for i in range(12):  # side by side: each path stays short, so this stays fast
        loom.append(loom.root, f"paragraph {i} " + "lorem ipsum dolor sit amet " * 20)
    close_session(loom)
    return path


def test_a_truncated_file_is_refused_untouched(loom, tmp_path):
    path = big_session(loom, tmp_path)
    data = path.read_bytes()
    assert len(data) > 40_000
    path.write_bytes(data[: len(data) // 2])
    _assert_refused(path, "not a readable loomterm session")


def test_a_damaged_page_is_refused_untouched(loom, tmp_path):
    path = big_session(loom, tmp_path)
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


def test_a_newer_schema_is_refused_untouched(loom, tmp_path):
    _, path = saved_sample(loom, tmp_path)
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


def test_a_session_in_use_is_refused_but_readable(loom, tmp_path):
    _, path = saved_sample(loom, tmp_path)
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


def test_the_same_process_cannot_open_twice_for_writing(loom, tmp_path):
    _, path = saved_sample(loom, tmp_path)
    first = SessionStore.open(path)
    with pytest.raises(SessionLockedError):
        SessionStore.open(path)
    first.close()
    SessionStore.open(path).close()


def test_saving_over_a_foreign_file_is_refused(loom, tmp_path):
    path = tmp_path / "notes.loom"
    path.write_text("my notes")
    with pytest.raises(SessionError):
        save_loom(loom, path)
    assert path.read_text() == "my notes"


# -- names ----------------------------------------------------------------------------


def test_names_resolve_under_the_sessions_folder_with_close_matches(loom):
    sample_tree(loom)
    save_loom(loom, "story")
    close_session(loom)
    assert resolve_session("story") == session_path("story")
    assert resolve_session("story").parent.name == "sessions"
    with pytest.raises(SessionError, match="close matches: story"):
        resolve_session("stroy")
    with pytest.raises(SessionError, match="no session named 'zzz'"):
        resolve_session("zzz")


def test_list_sessions_reports_each_file(loom):
    sample_tree(loom)
    save_loom(loom, "one")
    close_session(loom)
    session_path("broken").write_bytes(b"nope")
    rows = {row.name: row for row in list_sessions()}
    one = rows["one"]
    assert one.model == loom.runner.loaded.name
    assert one.nodes == len(loom.tree.nodes)
    assert one.path_tokens == len(loom.cursor.path_tokens())
    assert one.modified > 0 and one.error is None
    assert rows["broken"].error


def test_origin_values_survive(loom, tmp_path):
    loom, path = saved_sample(loom, tmp_path)
    origins = {Origin(n.origin) for n in load(path).tree.nodes.values()}
    assert {Origin.ROOT, Origin.USER, Origin.MODEL, Origin.EDIT} <= origins


def test_save_again_flushes_and_save_as_moves_the_session(loom, tmp_path):
    sample_tree(loom)
    first = tmp_path / "first.loom"
    session = save_loom(loom, first)
    assert save_loom(loom, first) is session  # same file: just a flush
    second = tmp_path / "second.loom"
    save_loom(loom, second)
    assert session.closed
    SessionStore.open(first).close()  # the old file is free again
    loom.append(loom.root, "only in the second")
    assert len(load(second).tree.nodes) == len(loom.tree.nodes)
    assert len(load(first).tree.nodes) == len(loom.tree.nodes) - 1
    close_session(loom)


def test_a_failing_disk_does_not_break_generation_and_is_reported(loom, tmp_path, monkeypatch):
    prompt = loom.append(loom.root, "Once upon a time")
    session = save_loom(loom, tmp_path / "full.loom")
    recorder = session.recorder

    def disk_full(*args, **kwargs):
        raise SessionError("cannot write session full.loom: database or disk is full")

    monkeypatch.setattr(recorder.store, "append_tokens", disk_full)
    monkeypatch.setattr(recorder.store, "write_data", disk_full)  # the retries fail too
    with pytest.warns(UserWarning, match="cannot be saved now"):
        node = loom.generate(prompt, 3, temperature=0.0)[0]
    assert len(node.tokens) == 3  # the generation was not cut short
    more = loom.generate(node, 3, temperature=0.0)[0]  # and generating carries on
    assert len(more.tokens) == 3
    with pytest.raises(SessionError, match="disk is full"):
        recorder.flush()
    with pytest.raises(SessionError, match="disk is full"):
        close_session(loom)
    SessionStore.open(tmp_path / "full.loom").close()  # released all the same
