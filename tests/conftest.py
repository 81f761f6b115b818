"""Shared fixtures: isolated loomterm folders and tiny seeded models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tiny_models import build_tiny_gpt2, build_tiny_llama


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory, monkeypatch):
    """Keep sessions and config of each test apart; share the model cache (it is slow to
    fill and read-only once made)."""
    base = tmp_path_factory.mktemp("loomterm")
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(base / "data"))
    monkeypatch.setenv("LOOMTERM_CONFIG_DIR", str(base / "config"))
    if "LOOMTERM_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(Path.home() / ".cache" / "loomterm-tests"))
    return base


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    return build_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


# The fast lane, ``pytest -m "not slow"`` (docs/development.md): the unit layer. Marked
# ``slow`` here, in one place: the editor's tests (Pilot, snapshots, tmux), the servers'
# (tests/remote/), those on the real default model (``default_model``), and the files
# and tests below, each measured at over a few seconds. CI runs everything.
SLOW_FOLDERS = ("tests/tui/", "tests/remote/")
SLOW_FILES = frozenset()
SLOW_TESTS = frozenset()


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        path, _, name = item.nodeid.partition("::")
        test = f"{path}::{name.split('[')[0]}"
        if (
            path.startswith(SLOW_FOLDERS)
            or path in SLOW_FILES
            or test in SLOW_TESTS
            or item.get_closest_marker("default_model")
        ):
            item.add_marker(slow)


def pytest_terminal_summary(terminalreporter):
    """Report the worst logit difference against a full recompute seen in this run."""
    from tests.helpers import WORST

    if WORST["checks"]:
        terminalreporter.write_line(
            f"recompute checks: {WORST['checks']}, worst relative logit difference "
            f"{WORST['relative']:.2e}"
        )
