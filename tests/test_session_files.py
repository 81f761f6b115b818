"""A session file is written only by its session, and is data: exports never write over
one, locks hold through symbolic links, a file whose schema could run something is
refused untouched, and an import killed midway leaves nothing behind."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loomterm.bench.files import files_rows, synthetic_session
from loomterm.cli import main
from loomterm.config.locations import sessions_dir
from loomterm.errors import SessionError
from loomterm.export import render
from loomterm.store import (
    SessionLockedError,
    SessionStore,
    check_file,
    load,
    summarize,
    write_session,
)

REPO = Path(__file__).resolve().parents[1]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_session(path: Path, shape: str = "deep", n: int = 5) -> Path:
    """A real session file, written by the store (no model needed)."""
    write_session(path, synthetic_session(shape, n)).close()
    return path


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# -- export never writes over a session, nor over a file unasked -------------------


def test_export_over_its_own_session_is_refused_and_loses_nothing(capsys):
    path = make_session(sessions_dir() / "story.loom")
    before = sha(path)
    for extra in ([], ["--force"], ["--format", "json", "--force"]):
        assert main(["export", "story", "-o", str(path), *extra]) == 1
        assert "never writes over a session" in one_line_error(capsys)
        assert sha(path) == before
    assert load(path).tree.nodes  # still a whole session


def test_a_session_is_known_by_its_content_under_any_name(tmp_path, capsys):
    make_session(sessions_dir() / "story.loom")
    other = make_session(tmp_path / "other.loom")
    disguised = tmp_path / "notes.md"
    disguised.write_bytes(other.read_bytes())
    link = tmp_path / "link.txt"
    link.symlink_to(other)
    for target in (other, disguised, link):
        before = sha(target)
        assert main(["export", "story", "-o", str(target), "--force"]) == 1
        assert str(target) in one_line_error(capsys)
        assert sha(target) == before
    assert link.is_symlink()
    # A session's name is refused even before one exists there.
    assert main(["export", "story", "-o", str(tmp_path / "new.loom")]) == 1
    assert "session file's name" in one_line_error(capsys)
    assert not (tmp_path / "new.loom").exists()


def test_an_existing_file_is_replaced_only_with_force(tmp_path, capsys):
    make_session(sessions_dir() / "story.loom")
    out = tmp_path / "story.md"
    out.write_text("my own notes\n")
    assert main(["export", "story", "-o", str(out)]) == 1
    err = one_line_error(capsys)
    assert "already exists" in err and "--force" in err
    assert out.read_text() == "my own notes\n"
    assert main(["export", "story", "-o", str(out), "--force"]) == 0
    assert out.read_text().startswith("# story")
    assert [p.name for p in tmp_path.iterdir()] == ["story.md"]  # no temporary file left
    assert main(["export", "story", "-o", str(tmp_path), "--force"]) == 1
    assert "is a folder" in one_line_error(capsys)


def test_dash_is_standard_output(tmp_path, capsys, monkeypatch):
    make_session(sessions_dir() / "story.loom")
    monkeypatch.chdir(tmp_path)
    assert main(["export", "story", "-o", "-", "--format", "txt"]) == 0
    out = capsys.readouterr().out
    assert out == render(load(sessions_dir() / "story.loom"), "txt")
    assert not (tmp_path / "-").exists()


# -- locks on the resolved path -----------------------------------------------------

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


def test_a_session_opened_through_a_link_conflicts_with_its_real_path(tmp_path):
    real = make_session(tmp_path / "real" / "story.loom")
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "alias.loom"
    link.symlink_to(real)
    dotted = tmp_path / "elsewhere" / ".." / "real" / "story.loom"
    first = SessionStore.open(link)
    try:
        for other in (real, dotted, link):
            with pytest.raises(SessionLockedError):
                SessionStore.open(other)
    finally:
        first.close()
    # Another process holding the real path: the link is refused too.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(repo=str(REPO), path=str(real))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(SessionLockedError, match=f"pid {holder.pid}"):
            SessionStore.open(link)
    finally:
        holder.kill()
        holder.wait()
    SessionStore.open(link).close()


# -- a session file is data ----------------------------------------------------------

# The red team's trigger: on the next generation (a token inserted) every earlier
# node's tokens are deleted.
PLANTS = {
    "trigger": "CREATE TRIGGER wipe AFTER INSERT ON tokens BEGIN "
    "DELETE FROM tokens WHERE node != NEW.node; END",
    "view": "CREATE VIEW leak AS SELECT * FROM session",
    "table": "CREATE TABLE extra (x)",
    "index": "CREATE INDEX by_piece ON tokens(piece)",
    "altered": None,  # the vocab table made with another definition
}


def plant(path: Path, what: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if what == "altered":
            conn.execute("DROP TABLE vocab")
            conn.execute(
                "CREATE TABLE vocab (token INTEGER PRIMARY KEY, piece TEXT NOT NULL "
                "DEFAULT (load_extension('evil')))"
            )
        else:
            conn.execute(PLANTS[what])
        conn.execute("PRAGMA journal_mode = DELETE")  # no log left beside the file
    finally:
        conn.close()


@pytest.mark.parametrize("what", sorted(PLANTS))
def test_a_schema_that_is_not_loomterms_is_refused_untouched(tmp_path, what):
    path = make_session(tmp_path / "planted.loom")
    tokens_before = len(load(path).tree.nodes)
    plant(path, what)
    before = sha(path)
    for attempt in (
        lambda: check_file(path),
        lambda: load(path),
        lambda: SessionStore.open(path),
        lambda: SessionStore.create(path, model={}, overwrite=True),
    ):
        with pytest.raises(SessionError) as info:
            attempt()
        message = str(info.value)
        assert "\n" not in message and str(path) in message
        assert sha(path) == before
    assert summarize(path).error  # the listing shows it as unreadable
    assert sha(path) == before
    assert not path.with_name(path.name + "-wal").exists()
    assert tokens_before


def test_the_planted_trigger_would_have_run(tmp_path):
    """What the check prevents: the same file, opened by plain SQLite, loses tokens on
    the next insert (so the test above refuses something real)."""
    path = make_session(tmp_path / "planted.loom")
    plant(path, "trigger")
    conn = sqlite3.connect(path)
    before = conn.execute("SELECT count(*) FROM tokens").fetchone()[0]
    conn.execute("INSERT INTO tokens VALUES (1, 99, 0, 'x', NULL, NULL)")
    after = conn.execute("SELECT count(*) FROM tokens").fetchone()[0]
    conn.close()
    assert after < before


def test_loomterms_own_files_pass_the_check(tmp_path):
    path = make_session(tmp_path / "fine.loom", "wide", 50)
    with SessionStore.open(path) as store:
        store.set_view("export_folder", "/somewhere")
    assert check_file(path) == 1
    with SessionStore.open(path) as store:
        assert store.view("export_folder") == "/somewhere"


# -- import: built beside its name, renamed into place ------------------------------

IMPORTER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from loomterm.cli import main
    sys.exit(main(["import", {source!r}, "--name", "big"]))
    """
)


def test_an_import_killed_midway_leaves_no_session_and_frees_the_name(tmp_path):
    source = tmp_path / "big.json"
    source.write_text(render(synthetic_session("wide", 150_000), "json"), encoding="utf-8")
    target = sessions_dir() / "big.loom"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen(
        [sys.executable, "-c", IMPORTER.format(repo=str(REPO), source=str(source))], env=env
    )
    try:
        deadline = time.monotonic() + 120
        while not list(sessions_dir().glob(".big.loom.*.tmp")):
            assert child.poll() is None, "the import ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)  # well into writing the tree
        assert child.poll() is None
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    assert not target.exists()
    assert [p.name for p in sessions_dir().glob("*.loom")] == []
    # The name is free: the same import goes through, and sweeps the dead one's file.
    small = tmp_path / "small.json"
    small.write_text(render(synthetic_session("wide", 10), "json"), encoding="utf-8")
    assert main(["import", str(small), "--name", "big"]) == 0
    assert len(load(target).tree.nodes) == 12
    assert not list(sessions_dir().glob(".big.loom.*.tmp"))


def test_import_round_trips_a_wide_and_a_deep_tree(tmp_path):
    for shape in ("wide", "deep"):
        data = synthetic_session(shape, 300)
        source = tmp_path / f"{shape}.json"
        source.write_text(render(data, "json"), encoding="utf-8")
        assert main(["import", str(source), "--name", shape]) == 0
        back = load(sessions_dir() / f"{shape}.loom")
        assert (
            json.loads(render(back, "json"))["nodes"] == json.loads(render(data, "json"))["nodes"]
        )


def test_the_files_bench_rows(capsys):
    rows = files_rows(300, 60, lambda text: None)
    names = [row.name for row in rows]
    assert len(rows) == 10 and names[0].startswith("import, wide")
    assert all(row.ratio > 0 and row.unit == "us/node" for row in rows)


def test_text_outline_of_a_deep_path_grows_linearly():
    """Indentation stops at eight levels: the outline of a path 2,000 branch points deep
    is about ten times that of one 200 deep (it was a hundred times: quadratic)."""
    sizes = [len(render(synthetic_session("deep", n), "txt", "all")) for n in (200, 2000)]
    assert sizes[1] < 12 * sizes[0]
    md = [len(render(synthetic_session("deep", n), "md", "all")) for n in (200, 2000)]
    assert md[1] < 12 * md[0]


def test_every_connection_is_hardened(tmp_path):
    """``trusted_schema`` off everywhere; where Python has ``setconfig`` (3.12+), also
    SQLite's defensive mode, with triggers and views off: a trigger that slipped past
    the check still would not fire."""
    from loomterm.store.guard import harden

    path = make_session(tmp_path / "s.loom")
    conn = harden(sqlite3.connect(path, isolation_level=None))
    try:
        assert conn.execute("PRAGMA trusted_schema").fetchone()[0] == 0
        if not hasattr(conn, "getconfig"):
            pytest.skip(f"Python {sys.version.split()[0]} has no Connection.setconfig")
        assert conn.getconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE)
        assert not conn.getconfig(sqlite3.SQLITE_DBCONFIG_ENABLE_TRIGGER)
        assert not conn.getconfig(sqlite3.SQLITE_DBCONFIG_ENABLE_VIEW)
    finally:
        conn.close()


def test_a_session_made_meanwhile_is_never_renamed_over(tmp_path, monkeypatch):
    """Two imports of one name: the one that takes the lock second finds the first's
    session there and stops, rather than replacing it with its own."""
    from loomterm.store import SessionLock

    theirs = make_session(tmp_path / "theirs.loom", "wide", 3)
    path = tmp_path / "race.loom"
    acquire = SessionLock.acquire

    def meanwhile(lock):
        if not path.exists():  # the other import finishes first, between check and lock
            path.write_bytes(theirs.read_bytes())
        acquire(lock)

    monkeypatch.setattr(SessionLock, "acquire", meanwhile)
    with pytest.raises(SessionError, match="already exists"):
        write_session(path, synthetic_session("deep", 4))
    assert path.read_bytes() == theirs.read_bytes()
    assert not list(tmp_path.glob(".race.loom.*.tmp"))


def test_an_export_to_a_device_writes_into_it(tmp_path, capsys):
    """``-o /dev/null`` needs no --force and leaves the device a device."""
    import os
    import stat

    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    from loomterm.export.target import write_export

    write_export(null, "text")
    assert stat.S_ISCHR(os.stat(null).st_mode)
