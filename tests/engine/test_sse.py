"""The event stream's lines in bounded memory (``engine.remote.sse``): any split of the
bytes into chunks gives the lines a whole read would, and a line past the cap stops
the stream in one line before more than the cap is held."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomterm.engine.remote.sse import sse_lines
from loomterm.errors import ServerStreamCut


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@given(
    text=st.text(alphabet="ab é\r\n:", max_size=60),
    cuts=st.lists(st.integers(0, 80), max_size=10),
)
def test_any_chunking_gives_the_lines_of_the_whole(text, cuts):
    data = text.encode()
    want = re.split(r"\r\n|\r|\n", text)
    if want and want[-1] == "":
        want.pop()  # a final line break ends the last line; it starts none
    assert list(sse_lines(split(data, cuts), "http://h", "/p")) == want


def test_a_line_past_the_cap_stops_holding_at_most_the_cap_and_a_chunk():
    held = []

    def endless():
        yield b"data: 1\n\ndata: "
        while True:
            yield b"a" * 4096
            held.append(1)

    lines = sse_lines(endless(), "http://h", "/completion", max_line=64 << 10)
    assert next(lines) == "data: 1"
    assert next(lines) == ""
    with pytest.raises(ServerStreamCut) as caught:
        next(lines)
    assert str(caught.value) == (
        "the server at http://h sent a line over 64 KiB on /completion: not an event "
        "stream, stopped reading it"
    )
    assert len(held) <= (64 << 10) // 4096 + 1
