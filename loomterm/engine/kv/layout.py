"""The layout of the working cache's row 0: which tokens of which nodes fill its
columns, in order (:class:`Segment` runs). Pure functions of a list of segments; the
cache (``kv.cache.WorkingCache``) keeps the list and moves the data.
"""

from __future__ import annotations

from dataclasses import dataclass

from loomterm.tree import Node


@dataclass
class Segment:
    """Tokens ``[lo, hi)`` of ``node`` occupy the next ``hi - lo`` buffer columns."""

    node: Node
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo


def appended(segments: list[Segment], node: Node, lo: int, count: int) -> None:
    """Record tokens ``[lo, lo+count)`` of ``node`` in the next columns of ``segments``
    (in place): the last run grows when it is the same node's preceding tokens."""
    last = segments[-1] if segments else None
    if last is not None and last.node is node and last.hi == lo:
        last.hi += count
    else:
        segments.append(Segment(node, lo, lo + count))


def truncated(segments: list[Segment], length: int) -> list[Segment]:
    """The runs of ``segments`` that fill the first ``length`` columns."""
    kept: list[Segment] = []
    total = 0
    for seg in segments:
        if total >= length:
            break
        take = min(seg.size, length - total)
        kept.append(Segment(seg.node, seg.lo, seg.lo + take))
        total += take
    return kept


def common_prefix(mine: list[Segment], target: list[Segment]) -> int:
    """How many leading columns of ``mine`` already hold ``target``'s pieces, computed
    the same way (same nodes, same offsets, same columns)."""
    matched = 0
    runs = iter(mine)
    seg = next(runs, None)
    seg_used = 0  # columns of ``seg`` already matched
    for want in target:
        lo = want.lo
        while lo < want.hi:
            if seg is None or seg.node is not want.node or seg.lo + seg_used != lo:
                return matched
            take = min(seg.size - seg_used, want.hi - lo)
            matched += take
            lo += take
            seg_used += take
            if seg_used == seg.size:
                seg, seg_used = next(runs, None), 0
    return matched


def without_columns(segments: list[Segment], start: int, count: int) -> list[Segment]:
    """``segments`` with columns ``[start, start+count)`` taken out."""
    out: list[Segment] = []
    col = 0
    for seg in segments:
        lo_col, hi_col = col, col + seg.size
        col = hi_col
        if hi_col <= start or lo_col >= start + count:
            out.append(seg)
            continue
        if lo_col < start:
            out.append(Segment(seg.node, seg.lo, seg.lo + start - lo_col))
        if hi_col > start + count:
            cut = start + count - lo_col
            out.append(Segment(seg.node, seg.lo + cut, seg.hi))
    return out


def split_renamed(segments: list[Segment], head: Node, tail: Node, offset: int) -> list[Segment]:
    """``segments`` after ``tail``'s first ``offset`` tokens moved to ``head``."""
    out: list[Segment] = []
    for seg in segments:
        if seg.node is not tail:
            out.append(seg)
            continue
        if seg.lo < offset:
            out.append(Segment(head, seg.lo, min(seg.hi, offset)))
        if seg.hi > offset:
            out.append(Segment(tail, max(seg.lo, offset) - offset, seg.hi - offset))
    return out


def column_of(segments: list[Segment], node: Node, offset: int = 0) -> int | None:
    """The column that holds ``node``'s token ``offset`` (clamped to its first run), or
    None when ``node`` fills no column."""
    total = 0
    for seg in segments:
        if seg.node is node:
            return total + max(0, min(offset, seg.hi) - seg.lo)
        total += seg.size
    return None
