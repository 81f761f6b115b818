"""Bench rows, the plain-text table and the JSON file."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Row:
    """One measured figure: the baseline, loomterm, and their ratio.

    ``ratio`` is oriented so that the ``target`` reads naturally: a speed-up (baseline
    time over loomterm time, or loomterm rate over baseline rate) against ``>= x``, or
    a cost (loomterm over the ideal) against ``<= x``. An ``absolute`` row (a KL
    divergence to a reference, whose baseline is zero) has no ratio (NaN); its target
    is on the ``loomterm`` figure itself.
    """

    section: str
    name: str
    baseline: float
    loomterm: float
    unit: str
    ratio: float
    target: str = ""  # e.g. ">=40" or "<=1.1"; empty when the row only informs
    note: str = ""
    extra: dict = field(default_factory=dict)
    absolute: bool = False

    @property
    def met(self) -> bool | None:
        """Whether the ratio (the figure, for an ``absolute`` row) meets the target
        (None without a target)."""
        value = self.loomterm if self.absolute else self.ratio
        if not self.target or not math.isfinite(value):
            return None
        if self.target.startswith(">="):
            return value >= float(self.target[2:])
        if self.target.startswith("<="):
            return value <= float(self.target[2:])
        raise ValueError(f"bad target {self.target!r}")


def speedup(baseline_time: float, loom_time: float) -> float:
    """How many times faster loomterm is (inf when it took no measurable time)."""
    if loom_time <= 0:
        return math.inf
    return baseline_time / loom_time


def ratio(numerator: float, denominator: float) -> float:
    if denominator == 0:
        return math.inf if numerator else 1.0
    return numerator / denominator


def _number(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    if unit == "%":
        return f"{value:.1f} %"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".rstrip()


def _ratio_text(value: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}x"
    if value >= 10:
        return f"{value:.1f}x"
    return f"{value:.2f}x"


HEADERS = ("row", "baseline", "loomterm", "ratio", "target", "met")


def format_table(rows: list[Row], title: str = "", notes: dict[str, str] | None = None) -> str:
    """Rows as an aligned plain-text table, grouped by section. ``notes``: one line
    under each section heading (what the baseline is)."""
    cells: list[tuple[str, ...] | str] = []
    section = None
    for row in rows:
        if row.section != section:
            section = row.section
            heading = section
            if notes and notes.get(section):
                heading += f" -- {notes[section]}"
            cells.append(heading)
        met = {True: "yes", False: "NO", None: ""}[row.met]
        target = f"{row.target}{'' if row.absolute else 'x'}" if row.target else ""
        name = f"  {row.name}" + (f"  [{row.note}]" if row.note else "")
        cells.append(
            (
                name,
                _number(row.baseline, row.unit),
                _number(row.loomterm, row.unit),
                _ratio_text(row.ratio),
                target,
                met,
            )
        )
    table = [c for c in cells if isinstance(c, tuple)]
    widths = [max(len(h), *(len(c[i]) for c in table)) for i, h in enumerate(HEADERS)]
    widths[0] = min(widths[0], 78)

    def line(values: tuple[str, ...]) -> str:
        first = values[0].ljust(widths[0])
        rest = [v.rjust(w) for v, w in zip(values[1:], widths[1:])]
        return "  ".join([first, *rest]).rstrip()

    out = [title] if title else []
    out.append(line(HEADERS))
    out.append("-" * len(line(HEADERS)))
    for cell in cells:
        out.append(cell if isinstance(cell, str) else line(cell))
    return "\n".join(out)


def to_json(rows: list[Row], meta: dict) -> dict:
    """A JSON-ready dict: ``{"meta": ..., "rows": [...]}``; non-finite numbers as None."""

    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return {
        "meta": clean(meta),
        "rows": [clean({**asdict(row), "met": row.met}) for row in rows],
    }


def write_json(path: str | Path, rows: list[Row], meta: dict) -> None:
    Path(path).write_text(json.dumps(to_json(rows, meta), indent=2) + "\n", encoding="utf-8")
