"""``LOOMTERM_REQUIRE_ALL_TESTS`` turns the skips of tests that need the machine's tools
(tmux, mounting a tmpfs) into failures, so CI cannot pass them by skipping."""

from __future__ import annotations

import pytest

from tests.helpers import REQUIRE_ALL, require_or_skip


def test_a_met_requirement_neither_skips_nor_fails(monkeypatch):
    monkeypatch.setenv(REQUIRE_ALL, "1")
    require_or_skip(True, "never")
    require_or_skip("/usr/bin/tmux", "never")


@pytest.mark.parametrize("value", [None, "", "0"])
def test_a_missing_tool_skips_by_default(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(REQUIRE_ALL, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_ALL, value)
    with pytest.raises(pytest.skip.Exception, match="^tmux is not installed$"):
        require_or_skip(None, "tmux is not installed")


@pytest.mark.parametrize("value", ["1", "yes"])
def test_a_missing_tool_fails_when_all_tests_are_required(monkeypatch, value):
    monkeypatch.setenv(REQUIRE_ALL, value)
    with pytest.raises(pytest.fail.Exception, match="^tmux is not installed .*must run"):
        require_or_skip(False, "tmux is not installed")
