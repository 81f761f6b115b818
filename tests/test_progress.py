"""Progress reports: the callback protocol and the one-line stderr bar."""

from __future__ import annotations

import io
import sys
import time

import pytest

from loomterm import progress as progress_module
from loomterm.progress import Progress, end_progress_line, print_progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def fresh_line(monkeypatch):
    monkeypatch.setattr(progress_module, "_line", progress_module._ProgressLine())


def test_timed_stage_ticks_then_ends_with_done_equal_total(monkeypatch):
    monkeypatch.setattr(progress_module, "HEARTBEAT_S", 0.01)
    calls = []
    report = Progress(lambda *call: calls.append(call))
    with report.timed("load"):
        time.sleep(0.1)
    assert calls[0] == ("load", 0, None)
    assert all(total is None for _, _, total in calls[1:-1])
    stage, done, total = calls[-1]
    assert stage == "load" and done == total


def test_timed_stage_switches_to_counting():
    calls = []
    report = Progress(lambda *call: calls.append(call))
    with report.timed("dequantize") as count:
        for index in range(3):
            count(index, 3)
        count(3, 3)
    assert calls == [
        ("dequantize", 0, None),
        ("dequantize", 0, 3),
        ("dequantize", 1, 3),
        ("dequantize", 2, 3),
        ("dequantize", 3, 3),  # the end comes once
    ]


def test_failed_stage_does_not_claim_to_finish():
    calls = []
    report = Progress(lambda *call: calls.append(call))
    with pytest.raises(RuntimeError), report.timed("load"):
        raise RuntimeError("boom")
    assert calls == [("load", 0, None)]


def test_no_callback_is_fine():
    report = Progress(None)
    with report.timed("load") as count:
        count(1, 2)
    report("x", 1, 1)


def test_bar_on_a_terminal_redraws_in_place(monkeypatch, fresh_line):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    print_progress("extract", 0, 4 << 20)
    print_progress("extract", 4 << 20, 4 << 20)
    print_progress("load", 0, None)
    print_progress("load", 1, 1)
    lines = terminal.getvalue().split("\n")
    assert lines[0].startswith("\rextract") and "100%" in lines[0] and "4.0/4.0 MiB" in lines[0]
    assert lines[1].startswith("\rload") and "done in" in lines[1]
    assert lines[2] == ""  # every finished stage ends its line


def test_bar_in_a_log_prints_only_finished_stages(monkeypatch, fresh_line):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    for done in range(0, 11):
        print_progress("dequantize", done, 10)
    print_progress("load", 0, None)
    print_progress("load", 2, None)
    print_progress("load", 2, 2)
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in log.getvalue()
    assert lines[0].startswith("dequantize") and "10/10" in lines[0]
    assert lines[1].startswith("load") and "done in" in lines[1]


def test_end_progress_line_closes_a_half_drawn_bar(monkeypatch, fresh_line):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    print_progress("download", 5, 10)
    end_progress_line()
    end_progress_line()  # twice is harmless
    assert terminal.getvalue().endswith("\n") and terminal.getvalue().count("\n") == 1
