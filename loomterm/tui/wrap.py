"""Wrapping the document's text into visual lines, and finding a char by its cell:
pure functions over the text and the lines' ``starts`` and ``ends`` (``tui.document``).
"""

from __future__ import annotations

from bisect import bisect_right

from loomterm.tui.sanitize import char_cells


def rewrap(
    text: str, at: int, width: int, starts: list[int], ends: list[int]
) -> tuple[list[int], list[int]]:
    """The visual lines of ``text`` wrapped to ``width`` cells (one kept free for the
    caret): ``starts`` and ``ends`` kept up to the logical line holding char ``at``,
    which is re-wrapped with every line after it."""
    at = min(at, len(text))
    line_start = text.rfind("\n", 0, at) + 1
    keep = bisect_right(starts, line_start - 1) if line_start else 0
    # Lines wholly before the changed logical line are unchanged.
    while keep and ends[keep - 1] >= line_start:
        keep -= 1
    starts, ends = starts[:keep], ends[:keep]
    limit = width - 1
    pos = line_start
    while True:
        newline = text.find("\n", pos)
        end = newline if newline >= 0 else len(text)
        wrap_line(text, pos, end, limit, starts, ends)
        if newline < 0:
            break
        pos = newline + 1
    return starts, ends


def wrap_line(
    text: str, start: int, end: int, limit: int, starts: list[int], ends: list[int]
) -> None:
    """Append the visual lines of the logical line ``text[start:end]``: break after the
    last space that fits, else mid-word. Stretches of plain ASCII (one cell a char) are
    measured by length; only stretches with other characters go char by char."""
    pos = start
    while True:
        if end - pos <= limit:
            candidate = text[pos:end]
            if candidate.isascii() and candidate.isprintable():
                break  # the rest fits
        else:
            candidate = text[pos : pos + limit + 1]
        if candidate.isascii() and candidate.isprintable():
            space = text.rfind(" ", pos, pos + limit)
            cut = space + 1 if space > pos else pos + limit
        else:
            cut = cut_cells(text, pos, end, limit)
            if cut >= end:
                break
        starts.append(pos)
        ends.append(cut)
        pos = cut
    starts.append(pos)
    ends.append(end)


def cut_cells(text: str, pos: int, end: int, limit: int) -> int:
    """Where the visual line starting at ``pos`` ends, measuring each character's
    cells (wide, zero-width and escaped characters); ``end`` if the rest fits."""
    width = 0
    last_space = -1
    i = pos
    while i < end:
        char = text[i]
        w = char_cells(char)
        if width + w > limit and i > pos:
            return last_space + 1 if last_space >= pos else i
        if char == " ":
            last_space = i
        width += w
        i += 1
    return end


def char_at_cell(text: str, starts: list[int], ends: list[int], line: int, column: int) -> int:
    """The char nearest cell ``column`` of visual ``line``."""
    line = max(0, min(line, len(starts) - 1))
    start, end = starts[line], ends[line]
    width = 0
    for i in range(start, end):
        w = char_cells(text[i])
        if width + w > column:
            return i if column - width < (w + 1) // 2 or w == 0 else i + 1
        width += w
    # Past the end. On a wrapped line the end char starts the next line: stop before.
    if line + 1 < len(starts) and starts[line + 1] == end and end > start:
        return end - 1
    return end
