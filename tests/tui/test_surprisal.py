"""The surprisal view: the whole document, typed text included, coloured by -log2 p."""

from __future__ import annotations

import math

from loomterm.tui.shades import surprisal_bucket
from tests.tui.conftest import TERMINAL, paste, settle


def test_surprisal_buckets_are_bits():
    def lp(bits):
        return -bits * math.log(2)

    assert surprisal_bucket(None) == 0
    assert [surprisal_bucket(lp(b)) for b in (0.5, 3, 5, 9, 12)] == [1, 2, 3, 4, 5]


async def test_f9_colours_typed_text_by_surprisal(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "The loom hummed quietly in the dark room.")
        await settle(pilot)
        node = loom.cursor
        assert all(lp is not None for lp in node.logprobs[1:])  # typed, yet scored
        view = app.view
        block = app.doc.blocks[-1]
        tokens = range(1, len(block.pieces))
        plain = [view._token_style(block, j) for j in tokens]  # noqa: SLF001
        await pilot.press("f9")
        await settle(pilot)
        assert view.surprisal and app.prefs.surprisal
        block = app.doc.blocks[-1]
        coloured = [view._token_style(block, j) for j in tokens]  # noqa: SLF001
        buckets = [surprisal_bucket(node.logprobs[block.first + j]) for j in tokens]
        assert all(b > 0 for b in buckets)
        assert all(c != p for c, p in zip(coloured, plain))  # every token took a colour
        by_bucket = {}
        for b, style in zip(buckets, coloured):
            by_bucket.setdefault(b, set()).add(style)
        assert all(len(styles) == 1 for styles in by_bucket.values())  # one colour a bucket
        if len(by_bucket) > 1:
            assert len({next(iter(v)) for v in by_bucket.values()}) == len(by_bucket)
        await pilot.press("f9")
        await settle(pilot)
        assert not view.surprisal


async def test_f9_shows_a_legend_that_says_it_is_on(make_app, loom):
    from tests.tui.screen_text import screen_text

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "The loom hummed quietly.")
        await settle(pilot)
        assert "surprisal" not in screen_text(app)
        await pilot.press("f9")
        await settle(pilot)
        legend = screen_text(app).splitlines()[-3]  # above the status bar
        assert legend.strip().startswith("surprisal view on (f9 turns it off):")
        assert "<2 bits" in legend and "\u226511 bits" in legend and "f9 turns it off" in legend
        # Each swatch has the colour of its bucket in the document.
        shades = app.shade_legend
        for bucket in range(1, 6):
            swatch = shades.get_component_rich_style(f"shade-legend--{bucket}")
            token = app.view.get_component_rich_style(f"document--prob-{bucket}")
            assert swatch.bgcolor == token.bgcolor
        await pilot.press("f6")  # probabilities too: surprisal still wins, as on screen
        await settle(pilot)
        assert shades.text.startswith("surprisal view on")
        await pilot.press("f9")
        await settle(pilot)
        assert shades.text.startswith("probability colours on") and "f6" in shades.text
        await pilot.press("f6")
        await settle(pilot)
        assert not shades.display and "colours on" not in screen_text(app)
