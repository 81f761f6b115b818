"""Sampler presets: shipped ones, the user's TOML files, applying and describing."""

from __future__ import annotations

import pytest

from loomterm.config.presets import SHIPPED, Preset, describe, load_presets
from loomterm.config.settings import Settings


def test_shipped_presets_are_valid_settings():
    presets, problems = load_presets()
    assert problems == []
    assert {"neutral", "llama.cpp", "creative", "precise"} <= set(presets)
    for preset in presets.values():
        preset.apply(Settings())  # every value passes the settings' checks


def test_applying_a_preset_resets_the_other_samplers_and_keeps_the_rest():
    before = Settings().replace(dry_multiplier=2.0, mirostat=2, max_new_tokens=64, n=2)
    after = Preset("precise", SHIPPED["precise"]).apply(before)
    assert after.dry_multiplier == 0.0 and after.mirostat == 0  # neutral again
    assert after.temperature == 0.3 and after.top_k == 40
    assert (after.max_new_tokens, after.n) == (64, 2)  # not samplers: kept
    assert after.preset == "precise"


def test_describe_says_when_a_preset_was_changed():
    presets, _ = load_presets()
    creative = presets["creative"].apply(Settings())
    assert describe(creative, presets) == "creative"
    assert describe(creative.replace(temperature=0.5), presets) == "creative (changed)"
    assert describe(Settings(), presets) == "custom"


def test_user_presets_come_from_toml_files_and_bad_ones_are_named(tmp_path):
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / "mine.toml").write_text("temperature = 0.7\nmin_p = 0.1\n")
    (folder / "precise.toml").write_text("temperature = 0.1\n")  # replaces the shipped one
    (folder / "typo.toml").write_text("temprature = 0.7\n")
    (folder / "range.toml").write_text("top_p = 3\n")
    (folder / "broken.toml").write_text("temperature = \n")
    (folder / "notsampler.toml").write_text("n = 3\n")
    presets, problems = load_presets(folder)
    assert presets["mine"].values == {"temperature": 0.7, "min_p": 0.1}
    assert presets["precise"].values == {"temperature": 0.1}
    assert presets["precise"].source.endswith("precise.toml")
    assert not {"typo", "range", "broken", "notsampler"} & set(presets)
    assert len(problems) == 4 and all("\n" not in p for p in problems)
    joined = " | ".join(problems)
    for name in ("typo.toml", "range.toml", "broken.toml", "notsampler.toml"):
        assert name in joined


def test_a_session_remembers_its_preset_and_changes(tiny_llama_dir, tmp_path):
    from loomterm.sessions.session import close_session, open_loom, save_loom
    from tests.helpers import make_loom

    loom = make_loom(tiny_llama_dir)
    presets, _ = load_presets()
    loom.update_settings(**presets["creative"].apply(loom.settings).as_dict())
    loom.update_settings(temperature=0.9)
    path = tmp_path / "p.loom"
    save_loom(loom, path)
    close_session(loom)
    again = open_loom(path)
    assert again.settings.preset == "creative" and again.settings.temperature == 0.9
    assert describe(again.settings, presets) == "creative (changed)"
    close_session(again)


@pytest.mark.asyncio
async def test_the_palette_applies_a_preset(tiny_llama_dir, tmp_path):
    from loomterm.engine import Loom
    from loomterm.tui.app import LoomApp

    loom = Loom.load(str(tiny_llama_dir), device="cpu")
    app = LoomApp(loom, show_speed=False, export_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Preset: precise")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert loom.settings.preset == "precise" and loom.settings.temperature == 0.3
