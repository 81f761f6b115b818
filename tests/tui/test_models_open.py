"""The editor's Attach model opens by the session's road (``engine.open``): the model
attached beside the session's takes its backend choice, threads and precision, and
the status bar says which backend runs the active model."""

from __future__ import annotations

import torch

from loomterm.engine import Loom
from tests.tiny_models import build_tiny_llama
from tests.tui.conftest import TERMINAL, settle
from tests.tui.screen_text import screen_text


async def test_attach_model_takes_the_sessions_options(make_app, tiny_llama_dir, tmp_path):
    other = build_tiny_llama(tmp_path / "other", seed=3)  # the same tokenizer
    before = torch.get_num_threads()
    loom = Loom.load(str(tiny_llama_dir), device="cpu", quant="int8", threads=2, n_ctx=512)
    app = make_app(loom)
    try:
        async with app.run_test(size=TERMINAL) as pilot:
            await settle(pilot)
            assert "cpu · torch (2 threads) · int8 (float32)" in screen_text(app)
            torch.set_num_threads(3)  # an Attach model that dropped the threads would keep 3
            app.models.ask_attach()
            await pilot.pause()
            app.screen.query_one("Input").value = str(other)
            await pilot.press("enter")
            await settle(pilot, timeout=60)
            (key,) = [key for key in loom.models if key != loom.active_model]
            attached = loom.models[key]
            assert (attached.backend, attached.threads) == ("torch", 2)
            assert attached.precision == "int8 (float32)"
            assert attached.options == loom.runner.options.but(n_ctx=None, kv_budget=None)
    finally:
        torch.set_num_threads(before)
