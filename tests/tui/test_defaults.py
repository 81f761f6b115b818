"""A new session samples as llama.cpp does by default (temperature 0.8, top-k 40, top-p
0.95, min-p 0.05) unless the model's generation_config says otherwise, and the settings
dialog says where each value came from."""

from __future__ import annotations

import argparse
import json
import shutil

import pytest

from loomterm.engine import Loom
from loomterm.engine.models.load import load_model
from loomterm.sessions import defaults
from loomterm.sessions.session import close_session
from tests.tui.conftest import settle
from tests.tui.screen_text import screen_text


@pytest.fixture
def fresh(tiny_loaded) -> Loom:
    return Loom.from_loaded(tiny_loaded, n_ctx=512)


@pytest.fixture(scope="module")
def opinionated_dir(tiny_llama_dir, tmp_path_factory):
    """The tiny model, with a generation_config that sets its own sampling."""
    folder = tmp_path_factory.mktemp("opinionated") / "model"
    shutil.copytree(tiny_llama_dir, folder)
    config = json.loads((folder / "generation_config.json").read_text())
    config.update(do_sample=True, temperature=0.6, top_p=0.9)
    (folder / "generation_config.json").write_text(json.dumps(config))
    return folder


def test_a_new_session_starts_from_llama_cpps_samplers(fresh):
    assert fresh.settings.temperature == 1.0  # the engine's own default: neutral
    settings = defaults.starting_settings(fresh)
    assert (settings.temperature, settings.top_k, settings.top_p, settings.min_p) == (
        0.8,
        40,
        0.95,
        0.05,
    )
    assert settings.preset == "llama.cpp"
    assert settings.max_new_tokens == fresh.settings.max_new_tokens  # only the samplers
    fresh.settings = settings
    where = defaults.sources(fresh)
    assert where["temperature"] == where["min_p"] == "llama.cpp default"
    assert where["xtc_probability"] == defaults.NEUTRAL


def test_the_models_generation_config_wins_where_it_says_something(opinionated_dir):
    loom = Loom.from_loaded(load_model(str(opinionated_dir), device="cpu"), n_ctx=512)
    assert defaults.model_sampling(loom) == {"temperature": 0.6, "top_p": 0.9}
    defaults.start_new_session(loom)
    settings = loom.settings
    assert (settings.temperature, settings.top_k, settings.top_p, settings.min_p) == (
        0.6,
        40,
        0.9,
        0.05,
    )
    assert settings.preset == ""  # no longer llama.cpp's as shipped
    where = defaults.sources(loom)
    assert where["temperature"] == where["top_p"] == defaults.FROM_MODEL
    assert where["top_k"] == where["min_p"] == "llama.cpp default"


def test_the_command_line_starts_new_sessions_so(tiny_llama_dir, monkeypatch):
    from loomterm.cli import run as cli_run

    monkeypatch.setattr(cli_run, "require_terminal", lambda: None)
    args = argparse.Namespace(
        model=str(tiny_llama_dir), device="cpu", dtype="auto", n_ctx=None, session="new",
        prompt=None,
    )  # fmt: skip
    loom, _ = cli_run.open_session(args)
    try:
        assert loom.settings.temperature == 0.8 and loom.settings.top_k == 40
    finally:
        close_session(loom)


async def test_the_settings_dialog_says_where_each_value_came_from(make_app, fresh):
    defaults.start_new_session(fresh)
    fresh.update_settings(max_new_tokens=8)
    app = make_app(target_loom=fresh)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f2")
        await pilot.pause()
        text = screen_text(app)
        row = next(line for line in text.splitlines() if "Temperature" in line)
        assert "0.8" in row and "llama.cpp default" in row
        row = next(line for line in text.splitlines() if "Min-p" in line)
        assert "llama.cpp default" in row
        app.screen.query_one("#setting-temperature").value = "0.7"
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert fresh.settings.temperature == 0.7
        assert defaults.sources(fresh)["temperature"] == defaults.CHANGED
        await pilot.press("f2")
        await pilot.pause()
        row = next(line for line in screen_text(app).splitlines() if "Temperature" in line)
        assert defaults.CHANGED in row
