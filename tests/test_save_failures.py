"""Saving never fails silently and never loses work (issue 30): a real full disk (a small
tmpfs), a file system made read-only, a data folder removed. Every change made while the
file cannot be written is kept (the live tree and a journal beside the data folder),
retried, and written once it can be; a journal left by a killed process is replayed when
the session is next opened; the command line fails with one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loomterm import store
from loomterm.store import journal
from tests.test_bad_environment import loomterm, one_clear_line, tmpfs  # noqa: F401


@pytest.fixture
def tiny_loom(tiny_llama_dir):
    from loomterm.engine import Loom

    loom = Loom.load(str(tiny_llama_dir), device="cpu")
    loom.update_settings(token_healing="off")  # generations are compared as they stream
    loom.update_settings(temperature=0.0)
    return loom


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill the file system of ``folder`` but for ``leave`` bytes."""
    filler = folder / "filler"
    stat = os.statvfs(folder)
    with open(filler, "wb") as handle:
        try:
            handle.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
        except OSError:
            pass
    return filler


def wait_for(predicate, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def path_texts(path: Path) -> set[str]:
    data = store.load(path)
    return {data.path_text(node) for node in data.tree.nodes.values() if not node.children}


def test_a_full_disk_keeps_every_change_in_a_journal_and_writes_it_once_there_is_room(
    tmpfs,  # noqa: F811
    tiny_loom,
    monkeypatch,
):
    from loomterm.sessions.session import Session, close_session

    data = tmpfs("data", "size=1m")
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(data))
    path = data / "story.loom"
    loom = tiny_loom
    session = Session.create(loom, path)
    first = loom.append(loom.root, "Once upon a time")
    loom.generate(first, 8)
    session.flush()
    states = []
    session.recorder.watch(states.append)

    filler = fill(data)
    second = loom.append(loom.root, "A different start " * 40)  # does not fit
    loom.generate(second, 20)
    loom.cursor = second
    state = session.recorder.state
    assert not state.ok and ("full" in state.error or "space" in state.error)
    assert state.journal is not None and state.journal.parent == data.parent / "data-journal"
    assert states and not states[-1].ok  # the editor hears it
    wanted = {loom.text(n) for n in loom.tree.nodes.values() if not n.children}

    filler.unlink()  # the writer frees some space: the next try writes it all
    # The listener hears the state a moment after it is set (on the writing thread).
    wait_for(lambda: session.recorder.state.ok and states[-1].ok, timeout=40)
    assert journal.journal_files(path) == []
    close_session(loom)
    assert path_texts(path) == wanted
    con = __import__("sqlite3").connect(f"file:{path}?mode=ro", uri=True)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_typing_on_a_full_disk_journals_each_change_from_its_first_changed_token(
    tmpfs,  # noqa: F811
    tiny_loom,
    monkeypatch,
):
    """Each key typed into a node while the disk is full is journaled from the first
    token it changed (a ``tokens`` line), not as the whole node again; a reader of the
    file and its journal sees every node as the live tree holds it, records included,
    after growing, retokenized, shortened and rewritten-in-the-middle text."""
    from loomterm.sessions.session import Session, close_session

    data = tmpfs("data", "size=1m")
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(data))
    path = data / "story.loom"
    loom = tiny_loom
    session = Session.create(loom, path)
    node = loom.append(loom.root, "Once upon a time")
    loom.cursor = node
    session.flush()
    filler = fill(data)
    text = "Once upon a time"
    edits = [text + " the" + " weaver wove" * i for i in range(1, 30)]  # typed on
    edits += [edits[-1][:-25], "Once upon a night" + edits[-1][16:-25], "Once"]
    for new_text in edits:
        node = loom.retype(node, new_text) or loom.edit(node, new_text)
        loom.cursor = node
        loom.next_logits(node)  # the model reads it: its records change
        assert loom.text(node) == new_text
    assert not session.recorder.state.ok
    lines = journal.read_lines(path)
    kinds = [line["kind"] for line in lines]
    assert kinds.count("tokens") > kinds.count("node")  # from the changed token on
    big = max(len(line["value"].get("tokens", [])) for line in lines if line["kind"] == "tokens")
    assert big < len(loom.encode(edits[-4]))
    read = store.load(path)  # the file and its journal, as a reader sees them
    for live in loom.tree.nodes.values():
        kept = read.tree.nodes[live.id]
        assert (kept.tokens, kept.logprobs) == (live.tokens, live.logprobs)
        assert [t and [tuple(x) for x in t] for t in kept.top] == [
            t and [tuple(x) for x in t] for t in live.top
        ]
    filler.unlink()
    wait_for(lambda: session.recorder.state.ok, timeout=40)
    close_session(loom)
    assert data_text(path) == "Once"


def data_text(path: Path) -> str:
    data = store.load(path)
    return data.path_text(data.cursor_node)


def test_a_removed_data_folder_is_made_again_with_everything(tmp_path, tiny_loom, monkeypatch):
    from loomterm.sessions.session import Session, close_session

    data = tmp_path / "data"
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(data))
    path = data / "sessions" / "story.loom"
    loom = tiny_loom
    session = Session.create(loom, path)
    loom.generate(loom.append(loom.root, "Once upon a time"), 6)
    session.flush()
    shutil.rmtree(data)  # SQLite alone would write on into the unlinked file
    node = loom.append(loom.root, "Written after the folder went")
    assert not session.recorder.state.ok
    assert "removed" in session.recorder.state.error
    wanted = {loom.text(n) for n in loom.tree.nodes.values() if not n.children}
    assert loom.text(node) in wanted
    wait_for(lambda: session.recorder.state.ok, timeout=20)
    close_session(loom)
    assert path_texts(path) == wanted


def test_a_data_folder_that_went_read_only_keeps_everything_until_it_is_writable(
    tmpfs,  # noqa: F811
    tiny_loom,
    monkeypatch,
):
    """The data folder's file system goes away under the open session (a lazy unmount:
    SQLite would write on into the detached file) and a read-only one takes its place,
    as a failing drive is remounted read-only: the writes fail and are kept; once it is
    writable again, the session is written there whole."""
    from loomterm.sessions.session import Session, close_session

    data = tmpfs("data", "size=1m")
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(data))
    path = data / "story.loom"
    loom = tiny_loom
    session = Session.create(loom, path)
    loom.generate(loom.append(loom.root, "Once upon a time"), 6)
    session.flush()
    subprocess.run(["umount", "-l", str(data)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(data)], check=True)
    try:
        loom.generate(loom.append(loom.root, "While it was read-only"), 6)
        assert not session.recorder.state.ok
        time.sleep(1.5)  # a retry or two fail meanwhile
        assert not session.recorder.state.ok
        assert session.recorder.state.journal is not None
        wanted = {loom.text(n) for n in loom.tree.nodes.values() if not n.children}
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(data)], check=True)
    wait_for(lambda: session.recorder.state.ok, timeout=40)
    close_session(loom)
    assert path_texts(path) == wanted


KILLED = """
import os, sys, time
from loomterm.engine import Loom
from loomterm.sessions.session import Session
loom = Loom.load(sys.argv[1], device="cpu")
loom.update_settings(temperature=0.0)
session = Session.create(loom, sys.argv[2])
loom.generate(loom.append(loom.root, "Once upon a time"), 6)
session.flush()
filler = sys.argv[3]
stat = os.statvfs(os.path.dirname(filler))
with open(filler, "wb") as handle:
    try:
        handle.write(b"\\0" * (stat.f_bavail * stat.f_frsize))
    except OSError:
        pass
node = loom.append(loom.root, "Typed while the disk was full " * 30)
loom.generate(node, 12)
assert not session.recorder.state.ok, "the write should have failed"
print(repr(loom.text(loom.generate(node, 4)[0] if False else node.children[0] if node.children else node)))
sys.stdout.flush()
os.kill(os.getpid(), 9)
"""


def test_a_journal_left_by_a_kill_during_a_full_disk_is_replayed_on_open(
    tmpfs,  # noqa: F811
    tiny_llama_dir,
    monkeypatch,
):
    from loomterm.sessions.session import close_session, open_loom

    data = tmpfs("data", "size=1m")
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(data))
    path = data / "story.loom"
    env = dict(os.environ, LOOMTERM_DATA_DIR=str(data))
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(tiny_llama_dir), str(path), str(data / "filler")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == -9, done.stderr
    last = eval(done.stdout.strip())  # noqa: S307 - our own repr
    kept = journal.journal_files(path)
    assert kept  # the changes are on disk, beside the session
    assert last in path_texts(path)  # a reader (export, read-only) sees them already
    aside = [(p, p.read_bytes()) for p in kept]
    for p, _ in aside:
        p.unlink()
    assert last not in path_texts(path)  # not in the session file itself
    for p, content in aside:
        p.write_bytes(content)
    (data / "filler").unlink()
    loom = open_loom(path, model=str(tiny_llama_dir), device="cpu")
    close_session(loom)
    assert last in path_texts(path)  # replayed into the file
    assert journal.journal_files(path) == []


def test_generate_on_a_full_disk_fails_in_one_line_naming_the_journal(tmpfs, tiny_llama_dir):  # noqa: F811
    data = tmpfs("data", "size=4m")
    env = dict(os.environ, LOOMTERM_DATA_DIR=str(data))
    path = data / "story.loom"
    args = ["generate", "-s", str(path), "--model", str(tiny_llama_dir), "--seed", "1"]
    first = loomterm(*args, "--prompt", "Once upon a time", "--max-new-tokens", "10", env=env)
    assert first.returncode == 0, first.stderr
    fill(data, leave=128 * 1024)
    second = loomterm(*args, "--prompt", " and then " * 800, "--max-new-tokens", "300", env=env)
    line = one_clear_line(second)
    assert "full" in line or "space" in line
    assert "journal" in line, line
    (data / "filler").unlink()
    third = loomterm(*args, "--max-new-tokens", "1", env=env)  # the journal is replayed
    assert third.returncode == 0, third.stderr
    assert " and then " * 800 in store.load(path).path_text()
    assert journal.journal_files(path) == []


def test_import_on_a_full_disk_fails_in_one_line_and_leaves_no_file(
    tmpfs,  # noqa: F811
    tiny_llama_dir,
    tmp_path,
):
    data = tmpfs("data", "size=1m")
    env = dict(os.environ, LOOMTERM_DATA_DIR=str(data))
    made = tmp_path / "made.loom"
    args = ["generate", "-s", str(made), "--model", str(tiny_llama_dir), "--seed", "1"]
    first = loomterm(*args, "--prompt", " and then " * 400, "--max-new-tokens", "50")
    assert first.returncode == 0, first.stderr
    tree = tmp_path / "tree.json"
    exported = loomterm("export", str(made), "--format", "json", "-o", str(tree))
    assert exported.returncode == 0, exported.stderr
    fill(data, leave=64 * 1024)
    result = loomterm("import", str(tree), "--name", "copy", env=env)
    line = one_clear_line(result)
    assert "full" in line or "space" in line
    assert not list((data / "sessions").glob("copy*.loom*"))  # nothing half-written left
