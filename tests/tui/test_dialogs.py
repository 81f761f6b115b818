"""Token alternatives, settings, export, help and the command palette."""

from __future__ import annotations

import json

import pytest

from loomterm.tree import Origin
from loomterm.tui.widgets.alternatives import AlternativesScreen
from loomterm.tui.widgets.settings import SettingsScreen, parse_settings
from tests.tui.conftest import TERMINAL, paste, settle, write_and_generate
from tests.tui.screen_text import screen_text


async def _open_alternatives_on_first_generated_token(pilot, app, loom):
    prompt = loom.cursor.parent
    app.doc.move_to(len(loom.text(prompt)))  # the caret on the first generated token
    await pilot.press("ctrl+a")
    await settle(pilot)
    assert isinstance(app.screen, AlternativesScreen)
    return prompt


async def test_alternatives_pick_makes_a_branch_without_a_forward_pass(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot)
        generated = loom.cursor
        prompt = await _open_alternatives_on_first_generated_token(pilot, app, loom)
        text = screen_text(app)
        assert "Alternatives at token" in text and "chosen" in text
        assert text.count("%") >= 10  # ten alternatives with probabilities
        calls = []
        original = loom.runner.forward  # noqa: SLF001
        loom.runner.forward = lambda *a, **k: calls.append(1) or original(*a, **k)  # noqa: SLF001
        await pilot.press("down", "enter")
        await settle(pilot)
        loom.runner.forward = original  # noqa: SLF001
        assert calls == []  # picking costs no forward pass
        picked = loom.cursor
        assert picked.meta.get("picked") and len(picked.tokens) == 1
        assert picked.parent is prompt or prompt.is_ancestor_of(picked)
        assert picked.tokens[0] == generated.top[0][1][0]  # the second-best token
        assert app.doc.text == loom.text(picked)


async def test_alternatives_pick_and_generate(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot)
        await _open_alternatives_on_first_generated_token(pilot, app, loom)
        await pilot.press("down", "down", "ctrl+g")
        await settle(pilot)
        node = loom.cursor
        assert node.origin is Origin.MODEL and len(node.tokens) == 12
        assert node.parent.meta.get("picked")


async def test_right_click_on_a_token_opens_its_alternatives(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "Hi")
        view = app.view
        # Column 1 is the margin; "Hi" then the first generated token from column 3.
        await pilot.click(view, offset=(4, 0), button=3)
        await settle(pilot)
        assert isinstance(app.screen, AlternativesScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, AlternativesScreen)


async def test_typed_text_has_alternatives_but_its_first_token_has_none(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Typed words")
        await settle(pilot)
        await pilot.press("ctrl+a")  # the token before the caret: a typed one
        await settle(pilot)
        assert isinstance(app.screen, AlternativesScreen)
        await pilot.press("escape")
        await pilot.press("home")
        await pilot.press("ctrl+a")
        await settle(pilot)
        assert not isinstance(app.screen, AlternativesScreen)
        messages = [n.message for n in app._notifications]  # noqa: SLF001
        assert any("nothing comes before it" in m for m in messages), messages


async def test_settings_are_edited_checked_and_kept_with_the_session(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("f2")
        await pilot.pause()
        assert isinstance(app.screen, SettingsScreen)
        screen = app.screen
        screen.query_one("#setting-temperature").value = "0.7"
        screen.query_one("#setting-top_p").value = "2"  # out of range
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, SettingsScreen)
        assert "Top-p must be" in screen_text(app)
        screen.query_one("#setting-top_p").value = "0.9"
        screen.query_one("#setting-n").value = "2"
        screen.query_one("#setting-splice_mode").value = "exact"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert not isinstance(app.screen, SettingsScreen)
        assert loom.settings.temperature == 0.7
        assert loom.settings.top_p == 0.9
        assert loom.settings.n == 2
        assert loom.settings.splice_mode == "exact"
        await pilot.pause(0.2)
        assert "T0.7 p0.9" in screen_text(app)


def test_parse_settings_names_each_bad_field():
    from loomterm.config.settings import DEFAULTS
    from loomterm.tui.widgets.settings import FIELDS

    good = {spec.name: spec.text(getattr(DEFAULTS, spec.name)) for spec in FIELDS}
    good.update(top_k="40", min_p="0.05", repetition_penalty="1.1", max_new_tokens="64")
    values, problems = parse_settings(good)
    assert problems == [] and values["top_k"] == 40 and values["min_p"] == 0.05
    values, problems = parse_settings({**good, "top_k": "x", "n": "0", "min_p": "1"})
    assert len(problems) == 3


async def test_settings_dialog_names_the_rule_a_value_breaks(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("f2")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#setting-n").value = "65"
        screen.query_one("#setting-temperature").value = "-1"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, SettingsScreen)
        assert "Temperature must be a number >= 0 (got -1.0)" in screen_text(app)
        assert str(screen.query_one("#problems").render()).splitlines() == [
            "Temperature must be a number >= 0 (got -1.0)",
            "N (siblings per ctrl+n) must be a whole number from 1 to 64 (got 65)",
        ]
        assert loom.settings.n == 3  # nothing changed


def test_settings_dialog_rows_come_from_the_settings_table():
    from loomterm.config.settings import Settings
    from loomterm.tui.widgets.settings import CHOICES, DIALOG, FIELDS

    names = [s.name for s in DIALOG]
    assert names[:5] == ["temperature", "top_p", "top_k", "min_p", "repetition_penalty"]
    # Every sampler is in the dialog, with the generation settings.
    samplers = [n for n, spec in Settings.SPECS.items() if spec.sampling]
    generation = {
        "max_new_tokens",
        "n",
        "splice_mode",
        "banned_strings",
        "banned_strings_ignore_case",
        "token_healing",
        "think_ahead",
        "think_ahead_pause",
    }
    assert set(samplers) | generation == set(names)
    assert set(FIELDS) | set(CHOICES) == set(DIALOG)
    assert all(Settings.SPECS[s.name] is s for s in DIALOG)


async def test_settings_dialog_fits_a_short_terminal(make_app):
    """Rows scroll; the buttons stay on screen (more samplers will come)."""
    app = make_app()
    async with app.run_test(size=(80, 18)) as pilot:
        await pilot.press("f2")
        await pilot.pause()
        save = app.screen.query_one("#save")
        assert save.region.bottom <= 18 and save.region.height == 1
        await pilot.click("#save")
        await pilot.pause()
        assert not isinstance(app.screen, SettingsScreen)


def test_new_session_like_keeps_the_engine_options_and_settings(loom):
    from loomterm.tui import ops

    loom.runner.kv_budget = 5 << 20
    loom.update_settings(splice_mode="exact", memory="Mara is a weaver.")
    fresh, _ = ops.new_session_like(loom)
    assert (fresh.n_ctx, fresh.runner.kv_budget) == (loom.n_ctx, 5 << 20)
    assert fresh.settings == loom.settings.replace(memory="")  # the story's memory stays


@pytest.mark.parametrize("fmt", ["md", "txt", "json", "html"])
async def test_export_dialog_writes_every_format(make_app, loom, exports, fmt):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "Once upon a time")
        await pilot.press("ctrl+e")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#format").value = fmt
        await pilot.pause()
        path_input = screen.query_one("#path")
        assert path_input.value.endswith(f"story.{fmt}")
        await pilot.press("ctrl+s")
        await settle(pilot)
        target = exports / f"story.{fmt}"
        assert target.is_file()
        body = target.read_text(encoding="utf-8")
        if fmt == "json":
            data = json.loads(body)
            assert data["format"] == "loomterm-tree"
            assert any(n["text"] == "Once upon a time" for n in data["nodes"])
        elif fmt == "html":  # every token is a span now (probabilities on hover)
            import html
            import re

            assert "Once upon a time" in html.unescape(re.sub(r"<[^>]+>", "", body))
        else:
            assert "Once upon a time" in body
        said = [n.message for n in app._notifications]  # noqa: SLF001
        assert any(m.startswith(f"Exported {fmt} to ") for m in said), said


async def test_help_lists_every_key_beside_its_action_id(make_app):
    from loomterm.tui.keymap import ACTIONS

    app = make_app()
    async with app.run_test(size=(140, 60)) as pilot:
        await pilot.press("f1")
        await pilot.pause()
        table = app.screen.query_one("DataTable")
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
        by_id = {row[1]: row for row in rows}
        for action in ACTIONS:
            keys, _, what = by_id[action.id]
            assert what.startswith(action.title)
            assert keys == (action.key or "(palette)")
        assert by_id["cursor_left"][0] == "left"  # the document's own keys too
        # and the branch pane's marks, which no key names ([2], ⏎, ∅, ...)
        marks = {row[0]: row[2] for row in rows}
        assert marks["[2]"].startswith("Branches") and marks["\u2205"].startswith("No text")
        assert marks["\u23ce"].startswith("Line break")
        text = screen_text(app)
        assert "ctrl+g" in text and "generate" in text
        # The longest id is whole on one line, as keymap.toml needs it (it used to wrap).
        assert "regenerate_own_context" in text
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]


async def test_help_shows_remapped_keys_and_fits_narrow_terminals(make_app):
    from loomterm.config.locations import config_dir

    config_dir().mkdir(parents=True, exist_ok=True)
    (config_dir() / "keymap.toml").write_text('generate = "f9"\n')
    app = make_app()
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.press("f1")
        await pilot.pause()
        table = app.screen.query_one("DataTable")
        cells = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert "f9\ngenerate" in cells  # narrow: the id under the keys
        text = screen_text(app)
        assert "f9" in text and "What it does" in text  # the description is in view


async def test_command_palette_runs_any_action(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"N siblings")
        await pilot.pause(0.5)
        assert "N siblings" in screen_text(app)
        await pilot.press("enter")
        await settle(pilot)
        assert len(loom.cursor.parent.children) == 3


async def test_command_palette_offers_every_action(make_app):
    from loomterm.tui.commands import LoomCommands
    from loomterm.tui.keymap import ACTIONS

    app = make_app()
    async with app.run_test(size=TERMINAL):
        provider = LoomCommands(app.screen)
        titles = {title for title, _, _ in provider.commands()}
        assert {action.title for action in ACTIONS} <= titles
        assert "Theme: loom-light" in titles


async def test_the_archive_question_wraps_instead_of_being_cut(make_app, loom):
    stem = loom.append(loom.root, "Once upon a time")
    loom.cursor = loom.append(stem, " there was a very long branch " * 4)
    loom.append(stem, " another")
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        from loomterm.tui.widgets.dialogs import ConfirmScreen

        await pilot.press("alt+h")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        text = screen_text(app)
        assert "Archive the branch" in text and "everything below it?" in text
        await pilot.press("n")


async def test_the_export_dialog_opens_on_the_format_list(make_app, loom):
    from textual.widgets import Select

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("ctrl+e")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen.focused, Select) and screen.focused.id == "format"
        path = screen.query_one("#path").value
        await pilot.press("space")  # opens the list; the path is left alone
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert screen.query_one("#path").value == path
        assert app.screen is screen  # nothing was exported


async def test_the_new_chat_dialog_focuses_its_first_field(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await app.run_action("new_chat")
        await pilot.pause()
        assert app.screen.focused is app.screen.query_one("#name")
        await pilot.press(*"mychat")
        assert app.screen.query_one("#name").value == "mychat"
        assert app.screen.query_one("#user").text == ""


async def test_the_alternatives_title_gives_the_current_tokens_probability_and_rank(make_app, loom):
    import math

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot)
        prompt = await _open_alternatives_on_first_generated_token(pilot, app, loom)
        node = loom.cursor
        assert node.parent is prompt
        p = math.exp(node.logprobs[0])
        title = app.screen.query_one(".dialog--title").render()
        assert f"{p:.2%}, rank 1 of 10" in str(title)  # greedy: the likeliest


async def test_settings_dialog_greys_out_fast_splice_on_a_model_without_rope(
    make_app, tiny_gpt2_dir
):
    """A GPT-2 (absolute positions) cannot re-rotate keys: the splice mode shows
    "exact", disabled, with the runner's reason; saving keeps the stored choice."""
    from loomterm.engine import Loom
    from loomterm.engine.models.load import load_model

    gpt2 = Loom.from_loaded(load_model(str(tiny_gpt2_dir)), n_ctx=256)
    assert gpt2.settings.splice_mode == "fast" and not gpt2.capabilities.rerope
    app = make_app(gpt2)
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("f2")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SettingsScreen)
        select = screen.query_one("#setting-splice_mode")
        assert select.disabled and select.value == "exact"
        why = str(screen.query_one(".settings--why").render())
        assert why.startswith("Splice mode is greyed out: this model has no rotary positions")
        screen.query_one(".settings--why").scroll_visible(animate=False)
        await pilot.pause()
        assert "greyed out" in screen_text(app)
        screen.query_one("#setting-temperature").value = "0.5"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert not isinstance(app.screen, SettingsScreen)
        assert gpt2.settings.temperature == 0.5
        assert gpt2.settings.splice_mode == "fast"  # kept for a model that can


async def test_settings_dialog_offers_fast_splice_where_the_model_can(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("f2")
        await pilot.pause()
        select = app.screen.query_one("#setting-splice_mode")
        assert not select.disabled and select.value == "fast"
        assert not screen_text(app).count("greyed out")
        assert not app.screen.query(".settings--why")


async def _open_export(pilot, app):
    await pilot.press("ctrl+e")
    await settle(pilot)
    return app.screen


async def test_changing_the_format_leaves_the_caret_after_the_new_extension(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        screen = await _open_export(pilot, app)
        screen.query_one("#format").value = "html"
        await pilot.pause()
        await pilot.press("tab", "tab")  # the format, the branches, then the file name
        assert screen.focused.id == "path"
        # Rewrite the extension by hand: the caret must be at the end of "story.html".
        await pilot.press("backspace", "backspace", "backspace", "backspace", *"htm")
        assert screen.query_one("#path").value.endswith("story.htm")


async def test_a_failed_export_keeps_the_dialog_and_says_why(make_app, loom, exports):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        screen = await _open_export(pilot, app)
        typed = str(exports / "missing" / "tale.md")
        screen.query_one("#path").value = typed
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.screen is screen  # still open
        assert screen.query_one("#path").value == typed  # nothing lost
        status = str(screen.query_one("#export-status").render())
        assert "cannot write" in status and "missing" in status
        assert "\n" not in status.strip()
        # Fixed in place, the same dialog exports.
        (exports / "missing").mkdir()
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.screen is not screen
        assert "Once upon a time" in (exports / "missing" / "tale.md").read_text()


async def test_the_export_dialog_remembers_folder_format_and_branches(make_app, loom, exports):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        screen = await _open_export(pilot, app)
        (exports / "out").mkdir()
        screen.query_one("#format").value = "txt"
        screen.query_one("#branch").value = "all"
        await pilot.pause()
        screen.query_one("#path").value = str(exports / "out" / "first.txt")
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert (exports / "out" / "first.txt").is_file()
        screen = await _open_export(pilot, app)
        assert screen.query_one("#format").value == "txt"
        assert screen.query_one("#branch").value == "all"
        assert screen.query_one("#path").value == str(exports / "out" / "story.txt")


async def test_a_letter_in_a_number_field_is_refused_aloud(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("f2")
        await settle(pilot)
        screen = app.screen
        field = screen.query_one("#setting-temperature")
        field.focus()
        await pilot.press("end", "x")
        await pilot.pause()
        assert field.value == "0"  # not typed...
        problems = str(screen.query_one("#problems").render())
        assert problems == "Temperature takes a number: 'x' was not typed"  # ...and said
        await pilot.press("5")  # a digit is taken: the refusal goes
        await pilot.pause()
        assert str(screen.query_one("#problems").render()) == ""
        await pilot.press("backspace", "ctrl+s")
        await settle(pilot)
        assert not isinstance(app.screen, SettingsScreen)
        messages = [n.message for n in app._notifications]  # noqa: SLF001
        assert "No setting changed" in messages
        assert not any("Settings saved" in m for m in messages)


@pytest.mark.parametrize("which", ["key consent", "name", "confirm"])
async def test_a_dialog_title_shows_outside_text_as_its_symbols(make_app, which):
    """A title names outside things (a server a session file gave, a session's name):
    a terminal escape or BEL in it is drawn as a symbol, never sent to the terminal,
    and brackets stay text."""
    from loomterm.tui.key_consent import KeyConsentScreen
    from loomterm.tui.widgets.dialogs import ConfirmScreen, NameScreen

    hostile = "evil\x1b[31m[b]red[/b]\x07"
    screens = {
        "key consent": lambda: KeyConsentScreen(f"http://{hostile}", "OPENAI_API_KEY"),
        "name": lambda: NameScreen(f"Rename {hostile}"),
        "confirm": lambda: ConfirmScreen(f"Delete {hostile}?"),
    }
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        app.push_screen(screens[which]())
        await settle(pilot)
        text = screen_text(app)
        assert "\x1b" not in text and "\x07" not in text
        assert "evil\u241b[31m[b]red[/b]\u2407" in text


async def test_a_dialog_field_shows_a_session_files_escapes_as_symbols(make_app, loom):
    """A memory from a session file (outside text) holding an OSC title and an inverse
    video sequence: the context dialog's field shows them as symbols, and nothing of
    them reaches the terminal."""
    from loomterm.tui.widgets.context import ContextScreen

    loom.update_settings(memory="Mem \x1b]2;PWNED\x07 A\x1b[7mINV\x1b[0m end")
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("f3")
        await settle(pilot)
        assert isinstance(app.screen, ContextScreen)
        text = screen_text(app)
        assert "\x1b" not in text and "\x07" not in text
        assert "Mem \u241b]2;PWNED\u2407 A\u241b[7mINV\u241b[0m end" in text


@pytest.mark.parametrize("dialog", ["search", "memory"])
async def test_a_paste_into_a_dialog_field_is_shown_as_its_symbols(make_app, loom, dialog):
    """A paste holding ESC and BEL into a one-line field (search) and a text area (the
    memory): held and drawn as symbols, in order; nothing reaches the terminal raw."""
    from textual import events

    loom.cursor = loom.append(loom.root, "Once upon a time")
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("ctrl+f" if dialog == "search" else "f3")
        await settle(pilot)
        field = app.screen.focused
        assert field is not None
        field.post_message(events.Paste("ab\x1b[7mINV\x1b[0mcd\x07"))
        await settle(pilot)
        text = screen_text(app)
        assert "\x1b" not in text and "\x07" not in text
        assert "ab\u241b[7mINV\u241b[0mcd\u2407" in text
