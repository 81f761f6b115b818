"""The assembly of what the model sees (``engine.context``): pure, no model."""

from __future__ import annotations

import pytest

from loomterm.config.injection import ContextSpec, ContextVersions, check_world_info
from loomterm.config.settings import SettingError, Settings
from loomterm.engine.context import (
    AUTHORS_NOTE,
    MEMORY,
    PATH,
    WORLD_INFO,
    assemble,
    encode_spec,
    note_point,
)
from loomterm.errors import ContextError

NL = 10  # the token that holds a newline, in these tests
WORDS = {"mem": [1, 2], "note": [3], "fox": [4, 4], "dog": [5]}


def encode(text: str) -> list[int]:
    """One token per word, and NL per newline: enough to see where each piece goes."""
    out = []
    for line in text.split("\n"):
        out += [t for word in line.split() for t in WORDS.get(word, [99])]
        out.append(NL)
    return out[:-1]


def decode(tokens: list[int]) -> str:
    names = {4: "fox", 5: "dog", NL: "\n"}
    return " ".join(names.get(t, "w") for t in tokens)


def build(path, n_ctx=100, reserve=0, start=(), **spec):
    encoded = encode_spec(ContextSpec(**spec), encode)
    return assemble(
        path,
        encoded,
        n_ctx,
        is_newline=lambda t: t == NL,
        decode=decode,
        start_tokens=start,
        reserve=reserve,
    )


def kinds(made):
    return [kind for kind, _, _ in made.spans()]


def test_nothing_injected_is_the_plain_path():
    assert build([7, 8, 9]) is None
    # World info that nothing triggers injects nothing either.
    assert build([7, 8], world_info=check_world_info([{"keys": ["fox"], "text": "dog"}])) is None


def test_memory_comes_first_with_a_newline_and_is_kept():
    made = build([7, 8, 9], memory="mem")
    assert made.tokens == [1, 2, NL, 7, 8, 9]
    assert kinds(made) == [MEMORY, PATH]
    assert made.kept == 3 and made.plain == 0
    assert made.injected() == [(MEMORY, 0, 3)]


def test_start_tokens_stay_before_the_memory():
    made = build([0, 7, 8], memory="mem", start=(0,))
    assert made.tokens == [0, 1, 2, NL, 7, 8]
    assert made.plain == 1  # the start token sits at its own position
    assert made.kept == 4


def test_author_note_depth_counts_lines_from_the_end():
    path = [7, NL, 8, NL, 9, 9]  # three lines; the last one is partial
    assert note_point(path, 0, 0, lambda t: t == NL) == 6  # after the last token
    assert note_point(path, 0, 1, lambda t: t == NL) == 4  # start of the last line
    assert note_point(path, 0, 2, lambda t: t == NL) == 2
    assert note_point(path, 0, 3, lambda t: t == NL) == 0
    assert note_point(path, 0, 9, lambda t: t == NL) == 0  # past the first line: the start
    # A newline as the last token starts no line yet: depth 1 is still "9 9\n".
    assert note_point([*path, NL], 0, 1, lambda t: t == NL) == 4
    made = build(path, authors_note="note", authors_note_depth=2)
    assert made.tokens == [7, NL, 3, NL, 8, NL, 9, 9]
    assert made.note_at == 2 and made.plain == 2  # the document above it is plain
    assert kinds(made) == [PATH, AUTHORS_NOTE, PATH]


def test_the_note_stays_put_while_a_line_grows():
    spec = dict(authors_note="note", authors_note_depth=1)
    before = build([7, NL, 8], **spec)
    after = build([7, NL, 8, 8, 8], **spec)
    assert before.note_at == after.note_at == 2
    assert after.tokens[: len(before.tokens)] == before.tokens  # only the new tokens differ


def test_world_info_triggers_on_the_last_scan_depth_tokens():
    info = check_world_info(
        {
            "scan_depth": 2,
            "entries": [{"keys": "fox", "text": "mem"}, {"keys": ["DOG"], "text": "note"}],
        }  # fmt: skip
    )
    made = build([4, 7, 7, 5], world_info=info)  # "fox" is 4 tokens back: out of reach
    assert made.tokens == [3, NL, 4, 7, 7, 5]
    assert kinds(made) == [WORLD_INFO, PATH]
    made = build([4, 5], world_info=info, memory="mem")
    assert kinds(made) == [MEMORY, WORLD_INFO, WORLD_INFO, PATH]  # memory, then entries in order
    assert made.tokens[:7] == [1, 2, NL, 1, 2, NL, 3]


def test_window_drops_document_blocks_and_keeps_the_memory():
    path = list(range(20, 60))  # 40 tokens, no newline
    made = build(path, n_ctx=20, memory="mem", authors_note="note", authors_note_depth=0)
    assert made.tokens[:3] == [1, 2, NL]
    assert made.tokens[-2:] == [3, NL]  # the note, at depth 0, last
    assert len(made.tokens) <= 20
    room = 20 - 3 - 2
    assert made.skipped % (room // 2) == 0 and made.skipped >= 40 - room
    assert made.tokens[3:-2] == path[made.skipped :]
    # A little more text keeps the same window start: the shift comes in blocks.
    again = build([*path, 61], n_ctx=20, memory="mem", authors_note="note", authors_note_depth=0)
    assert again.skipped in (made.skipped, made.skipped + room // 2)


def test_no_room_for_the_document_is_one_line_error():
    with pytest.raises(ContextError, match="no room for the document"):
        build([7, 8], n_ctx=4, memory="mem fox fox")
    with pytest.raises(ContextError, match="shorten them"):
        build([7, 8], n_ctx=10, reserve=7, memory="mem")


def test_world_info_shape_is_validated_in_one_line():
    assert check_world_info([{"keys": "a, b", "text": "x"}]) == {
        "scan_depth": 64,
        "entries": [{"keys": ["a", "b"], "text": "x"}],
    }
    bad = [
        ({"entries": [{"keys": [], "text": "x"}]}, "entry 1 has no keys"),
        ({"entries": [{"keys": ["a"], "text": " "}]}, r"entry 1 \(a\) has no text"),
        ({"scan_depth": 0}, "scan_depth must be"),
        ({"entries": [{"keys": [1], "text": "x"}]}, "keys must be a list of words"),
        ({"oops": 1}, "takes only scan_depth and entries"),
        ("text", "must be a table"),
    ]
    for value, message in bad:
        with pytest.raises(SettingError, match=message) as info:
            Settings().replace(world_info=value)
        assert "\n" not in str(info.value) and str(info.value).startswith("world_info ")
    with pytest.raises(SettingError, match="authors_note_depth"):
        Settings().replace(authors_note_depth=-1)


def test_versions_are_content_ids():
    plain = ContextSpec()
    assert plain.version == "" and not plain.active
    one = ContextSpec(memory="a")
    assert one.version == ContextSpec(memory="a").version != ContextSpec(memory="b").version
    book = ContextVersions()
    assert book.add(one) == (one.version, True)
    assert book.add(ContextSpec(memory="a")) == (one.version, False)
    again = ContextVersions()
    assert again.load(book.as_dict()) == [] and again.get(one.version) == one
    assert again.load({"x": {"authors_note_depth": -2}})[0].startswith("context version x")
