"""The editor fuzz (``test_fuzz_editor``) with the search, rating and tree-tidying keys
among its commands: random splits, merges, moves, ratings and their undos mixed with
typing, pastes and generations. The same invariants: no unexpected error, the
document reads what the engine's cursor reads, the session file holds the same tree."""

from __future__ import annotations

import pytest

from tests.tui import test_fuzz_editor as fuzz

TOOL_KEYS = ["alt+k", "alt+j", "alt+c", "alt+y", "alt+g", "alt+x", "alt+r", "ctrl+f", "alt+n"]


@pytest.mark.parametrize("seed", [7])
async def test_random_editing_with_the_tree_tools(seed, loom, tmp_path, monkeypatch):
    # Half the commands are the tools, undo and redo among the rest.
    monkeypatch.setattr(fuzz, "COMMANDS", fuzz.COMMANDS + TOOL_KEYS * 2)
    monkeypatch.setattr(fuzz, "EVENTS_PER_SEED", 700)
    await fuzz.test_random_keys_pastes_and_clicks(seed, loom, tmp_path)
