"""The Loom is made by composition: its parts (``engine/loom/``) reach each other and the
facade only through public names, and the facade stays a small module."""

from __future__ import annotations

import ast
from pathlib import Path

LOOM = Path(__file__).resolve().parents[2] / "loomterm" / "engine" / "loom"
MOST_LINES = 500


def foreign_private(source: str) -> list[str]:
    """``x._name`` in ``source`` where ``x`` is not ``self`` or ``cls`` (dunders aside):
    one object reading another's private state."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        found.append(f"{ast.unparse(node)} (line {node.lineno})")
    return found


def test_no_part_reads_another_objects_private_names():
    modules = sorted(LOOM.glob("*.py"))
    assert len(modules) > 10  # the folder is still where this test looks
    found = {path.name: foreign_private(path.read_text()) for path in modules}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_a_private_read_is_caught():
    source = (
        "class A:\n    def f(self):\n        return self.loom._models, self._own, x.__class__\n"
    )
    assert foreign_private(source) == ["self.loom._models (line 3)"]


def test_the_loom_modules_are_small():
    sizes = {path.name: len(path.read_text().splitlines()) for path in LOOM.glob("*.py")}
    assert sizes["facade.py"] > 100  # still the facade
    assert {name: n for name, n in sizes.items() if n > MOST_LINES} == {}
