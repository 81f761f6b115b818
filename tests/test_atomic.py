"""The one atomic-write helper: a file holds its old content or its new, never a mix."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loomterm import atomic
from loomterm.atomic import atomic_path, write_atomic

REPO = Path(__file__).resolve().parents[1]


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_text_and_bytes_replace_the_file_and_leave_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    write_atomic(target, "first\r\nline é\n")
    assert target.read_bytes() == "first\r\nline é\n".encode()  # UTF-8, newlines as given
    write_atomic(target, b"\x00\xffbytes")
    assert target.read_bytes() == b"\x00\xffbytes"
    assert names(tmp_path) == ["out.txt"]


@pytest.mark.parametrize("fails", ["fsync", "replace", "chmod"])
def test_a_failure_mid_write_keeps_the_old_file_and_cleans_up(
    tmp_path, monkeypatch, umask_022, fails
):
    target = tmp_path / "out.txt"
    target.write_text("old content")
    target.chmod(0o600)  # so that keeping its mode needs a chmod of the temporary

    def broken(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, fails, broken)
    with pytest.raises(OSError, match="No space left on device"):
        write_atomic(target, "new content " * 10_000)
    monkeypatch.undo()
    assert target.read_text() == "old content"
    assert names(tmp_path) == ["out.txt"]


def test_a_writer_that_fails_inside_the_block_changes_nothing(tmp_path):
    target = tmp_path / "weights.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(target) as temp:
        assert temp.parent == tmp_path and temp.exists()
        temp.write_bytes(b"half of the new")
        raise RuntimeError("the writer gave up")
    assert target.read_bytes() == b"old"
    assert names(tmp_path) == ["weights.bin"]


def test_a_writer_that_makes_the_file_itself(tmp_path):
    target = tmp_path / "made.bin"
    with atomic_path(target) as temp:
        temp.unlink()  # as a writer that creates its file from scratch may do
        temp.write_bytes(b"made by the writer")
        assert not target.exists()  # nothing shows until the block ends
    assert target.read_bytes() == b"made by the writer"
    assert names(tmp_path) == ["made.bin"]


HALF_WRITTEN = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {repo!r})
    from loomterm.atomic import atomic_path
    with atomic_path({path!r}) as temp, open(temp, "wb") as handle:
        handle.write(b"new" * 100_000)
        handle.flush()
        print("half", flush=True)
        time.sleep(60)
        handle.write(b"rest")
    """
)


def test_a_kill_mid_write_leaves_the_old_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_bytes(b"old content")
    child = subprocess.Popen(
        [sys.executable, "-c", HALF_WRITTEN.format(repo=str(REPO), path=str(target))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "half"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert target.read_bytes() == b"old content"
    # Nothing could clean up after SIGKILL: at most one hidden temporary, never the target.
    left = [name for name in names(tmp_path) if name != "out.txt"]
    assert len(left) <= 1 and all(n.startswith(".out.txt.") and n.endswith(".tmp") for n in left)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_the_permissions_of_an_existing_file_are_kept(tmp_path, umask_022):
    target = tmp_path / "private.json"
    target.write_text("{}")
    target.chmod(0o640)
    write_atomic(target, '{"a": 1}')
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.read_text() == '{"a": 1}'


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_a_new_file_gets_the_usual_mode_not_a_private_one(tmp_path, umask_022):
    target = tmp_path / "new.md"
    write_atomic(target, "hello")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.skipif(os.name != "posix", reason="symbolic links")
def test_a_symbolic_link_is_followed_and_kept(tmp_path):
    real = tmp_path / "dotfiles" / "tui.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "tui.json"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink()
    assert real.read_text() == "new"
    assert names(real.parent) == ["tui.json"]


def test_a_missing_folder_is_an_error_and_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "out.txt", "text")
    assert names(tmp_path) == []


def test_the_folder_is_synced_after_the_rename(tmp_path, monkeypatch):
    synced: list[str] = []
    real_sync_folder = atomic._sync_folder

    def spy(folder):
        synced.append(str(folder))
        real_sync_folder(folder)

    monkeypatch.setattr(atomic, "_sync_folder", spy)
    write_atomic(tmp_path / "out.txt", "text")
    assert synced == [str(tmp_path)]


def test_a_device_is_written_into_never_replaced(tmp_path):
    """``-o /dev/null`` must leave the null device a device (a rename over it once made
    the machine's /dev/null a plain file and stopped every tmux server)."""
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    write_atomic(null, "gone")
    assert stat.S_ISCHR(os.stat(null).st_mode)
    full = tmp_path / "full"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    with pytest.raises(OSError):
        write_atomic(full, "x" * 10_000)
    assert stat.S_ISCHR(os.stat(full).st_mode)
    with pytest.raises(OSError, match="not a regular file"):
        with atomic_path(null):
            pass
    assert stat.S_ISCHR(os.stat(null).st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_pipe_receives_the_text(tmp_path):
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, "through the pipe")
    reader.join(10)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
