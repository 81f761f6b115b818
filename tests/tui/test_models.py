"""Several models in the editor: switching the active model (alt+l, the palette),
attaching one (and one-line refusals), siblings from several models at once (ctrl+n's
dialog), a colour per model with a legend, and blind mode (alt+w) revealing who wrote
what only once a branch is picked."""

from __future__ import annotations

import pytest
from rich.color import Color

from loomterm.engine.local.runner import LocalRunner
from loomterm.engine.models.load import load_model
from loomterm.tree import Origin
from tests.tiny_models import build_tiny_llama, build_tokenizer
from tests.tui.conftest import TERMINAL, paste, settle
from tests.tui.screen_text import screen_text


@pytest.fixture(scope="module")
def gpt2_loaded(tiny_gpt2_dir):
    return load_model(str(tiny_gpt2_dir))


@pytest.fixture
def two(loom, gpt2_loaded):
    """The tiny Llama loom with the tiny GPT-2 (same tokenizer) attached as "g"."""
    loom.attach("g", LocalRunner(gpt2_loaded, n_ctx=512))
    return loom


def messages(app, severity: str | None = None) -> list[str]:
    return [
        n.message
        for n in app._notifications  # noqa: SLF001
        if severity is None or n.severity == severity
    ]


def colours_on_screen(app, text: str) -> set[str]:
    """Foreground colours of the screen's segments that contain ``text`` (the legend
    line left out)."""
    found = set()
    legend_row = app.models.legend.region.y
    for y, strip in enumerate(app.screen._compositor.render_strips()):  # noqa: SLF001
        if y == legend_row:
            continue
        for segment in strip:
            if text in segment.text and segment.style is not None and segment.style.color:
                found.add(segment.style.color.get_truecolor().hex)
    return found


def hex_of(colour: str) -> str:
    return Color.parse(colour).get_truecolor().hex


async def test_alt_l_and_the_palette_switch_the_active_model(make_app, two):
    llama = two.active_model
    app = make_app(two)
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+l")
        await settle(pilot)
        assert two.active_model == "g"
        assert "tiny-gpt2" in screen_text(app).splitlines()[-2]  # the status bar
        await paste(pilot, "Once upon a time")
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert two.cursor.origin is Origin.MODEL and two.cursor.meta["model"] == "g"
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*f"Model: {llama}")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await settle(pilot)
        assert two.active_model == llama
        legend = app.models.legend.plain
        assert f"{llama} (active)" in legend and "g" in legend


async def test_alt_l_with_one_model_says_how_to_attach_one(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+l")
        await settle(pilot)
        assert any("attach another" in m for m in messages(app))
        assert app.models.legend.has_class("-hidden")  # one model: no legend


async def test_attach_by_path_and_bad_ones_are_one_line(make_app, loom, tiny_gpt2_dir, tmp_path):
    other = build_tiny_llama(tmp_path / "other", seed=2)
    build_tokenizer(320).save_pretrained(other)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        for source in (str(tmp_path / "missing-model"), str(other)):
            app.models.ask_attach()
            await pilot.pause()
            await paste(pilot, source)
            app.screen.query_one("Input").value = source
            await pilot.press("enter")
            await settle(pilot, timeout=60)
        errors = messages(app, "error")
        assert len(errors) == 2 and all("\n" not in e for e in errors)
        assert "cannot join this tree: its vocabulary has 3" in errors[1]
        assert list(loom.models) == [loom.active_model]
        app.models.ask_attach()
        await pilot.pause()
        app.screen.query_one("Input").value = str(tiny_gpt2_dir)
        await pilot.press("enter")
        await settle(pilot, timeout=60)
        assert len(loom.models) == 2 and not loom.models[list(loom.models)[1]].capabilities.node_kv
        assert any(m.startswith("Attached ") for m in messages(app))
        assert not app.models.legend.has_class("-hidden")


async def test_ctrl_n_asks_several_models_and_each_has_its_colour(make_app, two):
    llama = two.active_model
    app = make_app(two)
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert "Siblings from several models" in screen_text(app)
        inputs = list(app.screen.query("Input"))
        inputs[0].value, inputs[1].value = "2", "1"  # llama 2, g 1
        await pilot.press("enter")
        await settle(pilot)
        prompt = two.cursor.parent
        writers = [kid.meta["model"] for kid in prompt.children]
        assert writers == [llama, llama, "g"]
        colours = app.models.colours
        assert set(colours) == {llama, "g"} and colours[llama] != colours["g"]
        # The document draws the shown sibling in its model's colour...
        shown = two.cursor
        text = two.decode(shown.tokens).strip().split()[0]
        assert hex_of(colours[shown.meta["model"]]) in colours_on_screen(app, text)
        # ...and the branch pane puts a swatch of each model's colour by its rows.
        swatches = colours_on_screen(app, "\u25a0")
        assert {hex_of(colours[llama]), hex_of(colours["g"])} <= swatches
        legend = app.models.legend.plain
        assert legend.startswith("models") and llama in legend and "g" in legend
        # Reopening the dialog offers the last counts.
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert [i.value for i in app.screen.query("Input")] == ["2", "1"]
        await pilot.press("escape")


async def test_blind_mode_hides_who_wrote_until_a_branch_is_picked(make_app, two):
    app = make_app(two)
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("alt+w")
        assert app.models.blind
        await pilot.press("ctrl+n")
        await pilot.pause()
        inputs = list(app.screen.query("Input"))
        inputs[0].value, inputs[1].value = "2", "2"
        await pilot.press("enter")
        await settle(pilot)
        prompt = two.cursor.parent
        kids = prompt.children
        assert len(kids) == 4 and sorted(k.meta["model"] for k in kids).count("g") == 2
        group = kids[0].meta["blind"]
        assert all(k.meta["blind"] == group for k in kids)
        assert all(app.models.writer_colour(k) is None for k in kids)  # hidden
        assert not colours_on_screen(app, "\u25a0")  # no swatch in the branch pane
        assert "4 branch(es) hidden" in app.models.legend.plain

        # Moving among the siblings does not pick one.
        await pilot.press("alt+right")
        await settle(pilot)
        assert all(app.models.writer_colour(k) is None for k in kids)

        # Continuing one picks it: every sibling's writer shows, and the mark is gone.
        await pilot.press("ctrl+end", "ctrl+g")
        await settle(pilot)
        assert all(app.models.writer_colour(k) is not None for k in kids)
        assert all("blind" not in k.meta for k in kids)
        assert any("models revealed" in m for m in messages(app))
        assert "hidden" not in app.models.legend.plain


async def test_alt_p_picks_and_bookmarks_pick_too(make_app, two):
    app = make_app(two)
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("alt+w")
        for pick in ("alt+p", "alt+s"):
            app.models.generate_from([(two.active_model, 1), ("g", 1)])
            await settle(pilot)
            kids = [k for k in two.cursor.parent.children if "blind" in k.meta]
            assert len(kids) == 2 and all(app.models.writer_colour(k) is None for k in kids)
            await pilot.press(pick)
            await settle(pilot)
            assert all("blind" not in k.meta for k in kids), pick
            assert all(app.models.writer_colour(k) is not None for k in kids)
        # With blind mode off, colours show whatever the marks say.
        await pilot.press("alt+w")
        assert not app.models.blind


async def test_a_rating_picks_too(make_app, two):
    app = make_app(two)
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("alt+w")
        app.models.generate_from([(two.active_model, 1), ("g", 1)])
        await settle(pilot)
        kids = [k for k in two.cursor.parent.children if "blind" in k.meta]
        assert len(kids) == 2 and all(app.models.writer_colour(k) is None for k in kids)
        app.jobs.set_meta(kids[1], rating=1)  # what the rating keys do
        await settle(pilot)
        assert all("blind" not in k.meta for k in kids)
        assert any("You rated a branch by" in m for m in messages(app))
