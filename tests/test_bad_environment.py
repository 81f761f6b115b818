"""A read-only data folder, a full disk (for real, on a small tmpfs), an unwritable
export path: each gets one clear line, no traceback, and nothing saved is lost."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from loomterm import store
from tests.helpers import require_or_skip


def loomterm(*args: str, env: dict | None = None, timeout: int = 300):
    exe = shutil.which("loomterm", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "loomterm.cli"]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env or dict(os.environ)
    )


def one_clear_line(result) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines, "expected an error message"
    assert lines[-1].startswith("loomterm: ")
    return lines[-1]


@pytest.fixture
def tmpfs(tmp_path):
    """Mount small tmpfs folders (root only, with ``mount``: skipped where mounting is not
    allowed, failed there under ``LOOMTERM_REQUIRE_ALL_TESTS=1``)."""
    mounted: list[Path] = []

    def mount(name: str, options: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True
        )
        require_or_skip(
            done.returncode == 0, f"cannot mount a tmpfs here: {done.stderr.decode().strip()}"
        )
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_read_only_data_folder(tmpfs, tiny_llama_dir):
    data = tmpfs("data", "ro,size=64k")
    env = dict(os.environ, LOOMTERM_DATA_DIR=str(data))
    result = loomterm(
        "generate", "-s", "story", "--prompt", "Hi", "--model", str(tiny_llama_dir), env=env
    )
    line = one_clear_line(result)
    assert "Read-only" in line or "read-only" in line


def test_full_disk_keeps_what_was_saved(tmpfs, tiny_llama_dir):
    data = tmpfs("data", "size=512k")
    env = dict(os.environ, LOOMTERM_DATA_DIR=str(data))
    path = data / "story.loom"
    args = ["generate", "-s", str(path), "--model", str(tiny_llama_dir), "--seed", "1"]
    first = loomterm(*args, "--prompt", "Once upon a time", "--max-new-tokens", "20", env=env)
    assert first.returncode == 0, first.stderr
    saved = store.load(path)
    kept = {n.id: list(n.tokens) for n in saved.tree.nodes.values()}
    # Now fill the disk but for a few kilobytes: the next generation cannot fit.
    stat = os.statvfs(data)
    (data / "filler").write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - 4096))
    second = loomterm(*args, "--max-new-tokens", "400", env=env)
    line = one_clear_line(second)
    assert "space" in line.lower() or "full" in line.lower()
    (data / "filler").unlink()  # the user frees some space; everything saved is there
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    after = store.load(path)
    for node_id, tokens in kept.items():
        assert after.tree.nodes[node_id].tokens[: len(tokens)] == tokens


def test_unwritable_export_path(tmpfs, tiny_llama_dir, tmp_path):
    path = tmp_path / "story.loom"
    made = loomterm(
        "generate",
        "-s",
        str(path),
        "--prompt",
        "Hello",
        "--max-new-tokens",
        "5",
        "--model",
        str(tiny_llama_dir),
    )
    assert made.returncode == 0, made.stderr
    readonly = tmpfs("out", "ro,size=64k")
    result = loomterm("export", str(path), "-o", str(readonly / "story.md"))
    one_clear_line(result)
    good = loomterm("export", str(path), "-o", str(tmp_path / "story.md"))
    assert good.returncode == 0 and (tmp_path / "story.md").read_text().strip()
