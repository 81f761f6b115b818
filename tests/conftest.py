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


def pytest_terminal_summary(terminalreporter):
    """Report the worst logit difference against a full recompute seen in this run."""
    from tests.helpers import WORST

    if WORST["checks"]:
        terminalreporter.write_line(
            f"recompute checks: {WORST['checks']}, worst relative logit difference "
            f"{WORST['relative']:.2e}"
        )
