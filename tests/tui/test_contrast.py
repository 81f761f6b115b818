"""Every shipped theme is readable: WCAG AA contrast for text (4.5:1), and 3:1 for the
branch pane's connectors (non-text graphics), measured on what the app draws.

Each bundled theme (``themes/*.tcss``) draws a screen with a branched tree, chat role
labels, probability colours and token boundaries, a bookmark, pending typing and the
status bar; every cell holding a visible character is checked, foreground against the
background it is drawn on.
"""

from __future__ import annotations

import pytest
from rich.color import Color

from loomterm.tui.themes import bundled_themes_dir
from tests.tui.conftest import TERMINAL, paste, settle

THEMES = sorted(f"loom-{p.stem}" for p in bundled_themes_dir().glob("*.tcss"))
GRAPHICS = set("\u251c\u2514\u2502\u25bc\u25b6\u203a\u258f\u2595\u2590\u258c\u2581\u2594 ")


def luminance(color: Color) -> float:
    """WCAG relative luminance."""
    r, g, b = color.get_truecolor()

    def channel(value: int) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(fg: Color, bg: Color) -> float:
    a, b = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def test_contrast_formula():
    black, white = Color.parse("#000000"), Color.parse("#ffffff")
    assert contrast(black, white) == pytest.approx(21.0)
    assert contrast(Color.parse("#777777"), white) == pytest.approx(4.48, abs=0.01)


def poor_cells(app, region: str) -> list[str]:
    """Segments drawn below the bar (4.5:1 text, 3:1 connectors), described."""
    problems = []
    strips = app.screen._compositor.render_strips()  # noqa: SLF001 - what reaches the screen
    for y, strip in enumerate(strips):
        for segment in strip:
            text, style = segment.text, segment.style
            if not text.strip() or style is None or segment.control:
                continue
            fg, bg = style.color, style.bgcolor
            if style.reverse:
                fg, bg = bg, fg
            if fg is None or bg is None:
                problems.append(f"{region} row {y} {text!r}: no colour")
                continue
            floor = 3.0 if set(text) <= GRAPHICS else 4.5
            if style.dim:
                continue  # the unfocused caret only
            ratio = contrast(fg, bg)
            if ratio < floor:
                problems.append(
                    f"{region} row {y} {text.strip()[:24]!r}: {ratio:.2f} < {floor} "
                    f"({fg.get_truecolor().hex} on {bg.get_truecolor().hex})"
                )
    return problems


@pytest.mark.parametrize("theme", THEMES)
async def test_every_shipped_theme_meets_wcag_aa(make_app, loom, theme):
    stem = loom.append(loom.root, "<|im_start|>user\nOnce upon a time", role="user")
    loom.append(stem, " there was a cat")
    king = loom.append(stem, " lived a king")
    loom.set_meta(king, bookmark=True)
    archived = loom.append(stem, " an archived branch")
    loom.set_meta(archived, hidden=True)
    loom.cursor = king
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        app.set_theme(theme)
        await pilot.press("ctrl+g")  # generated text (with probabilities and alternatives)
        await settle(pilot)
        await app.run_action("toggle_hidden")
        await settle(pilot)
        problems = poor_cells(app, "plain")
        await pilot.press("f6")  # probability colours
        await pilot.pause()
        problems += poor_cells(app, "probabilities")
        await pilot.press("f6", "f5")  # token boundaries
        await pilot.pause()
        problems += poor_cells(app, "boundaries")
        await pilot.press("f5")
        app.sync_delay = 60.0
        await paste(pilot, " typed, not yet synced")
        problems += poor_cells(app, "pending")
        await pilot.press("f4")  # the branch pane focused: its cursor row
        await pilot.pause()
        problems += poor_cells(app, "tree focused")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("theme", THEMES)
def test_every_pair_a_theme_can_draw_meets_wcag_aa(theme):
    """Beyond one screen: every document colour on every background it can get (token
    boundaries, each probability bucket), and the branch pane's colours on its own."""
    from textual.app import App

    from loomterm.tui.themes import LOOM_DEFAULTS, load_themes, resolve_references, solidify

    class Probe(App):
        def get_theme_variable_defaults(self) -> dict[str, str]:
            return dict(LOOM_DEFAULTS)

    app = Probe()
    for item in load_themes()[0]:
        app.register_theme(item)
    app.theme = theme
    v = solidify(resolve_references(app.get_css_variables()))

    def ratio(fg: str, bg: str) -> float:
        return contrast(Color.parse(v[fg]), Color.parse(v[bg]))

    texts = ["loom-user", "loom-model", "loom-import", "loom-special", "loom-control"]
    texts += ["loom-approx"]
    backgrounds = ["background", "loom-token-a", "loom-token-b"]
    backgrounds += [f"loom-prob-{i}" for i in range(1, 6)]
    pairs = [(fg, bg, 4.5) for fg in texts for bg in backgrounds]
    pairs += [(fg, "background", 4.5) for fg in ("loom-role", "loom-muted", "foreground")]
    pairs += [("loom-pending", "loom-pending-background", 4.5)]
    pairs += [(fg, "surface", 4.5) for fg in ("foreground", "loom-model", "loom-path")]
    pairs += [(fg, "surface", 4.5) for fg in ("loom-bookmark", "loom-muted")]
    pairs += [("loom-guide", "surface", 3.0), ("loom-guide", "background", 3.0)]
    pairs += [(fg, "panel", 4.5) for fg in ("foreground", "accent", "warning", "error")]
    poor = [
        f"{fg} on {bg}: {ratio(fg, bg):.2f} < {floor}"
        for fg, bg, floor in pairs
        if ratio(fg, bg) < floor
    ]
    assert not poor, "\n".join(poor)
