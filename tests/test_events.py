"""The engine's events are one enum, and the recorder has a line for each."""

from __future__ import annotations

import ast
from pathlib import Path

from loomterm.engine.events import Event
from loomterm.sessions import keeping, recorder

ROOT = Path(__file__).resolve().parents[1] / "loomterm"


def test_the_recorder_writes_and_journals_every_event():
    written = set(recorder.NODE_WRITES) | set(recorder.WRITES)
    kept = set(keeping.NODE_KEEPS) | set(keeping.KEEPS)
    assert written == set(Event), set(Event) - written
    assert kept == set(Event), set(Event) - kept
    assert not set(recorder.NODE_WRITES) & set(recorder.WRITES)
    assert not set(keeping.NODE_KEEPS) & set(keeping.KEEPS)


def test_the_engine_emits_events_never_bare_strings():
    """``emit("add", ...)`` would still work (an Event is a str) but would let a typo
    through: every emit and notify in the package names an Event member."""
    bare = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("emit", "notify")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and node.args[0].value in {e.value for e in Event}
            ):
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare, bare


def test_an_event_reads_as_its_name():
    assert Event.ADD == "add" and str(Event.SPLIT) == "split" and f"{Event.DONE}" == "done"
