"""The bench's llama.cpp runner section on the default model, sized down: every row it
can run is there and measured, llama-server (found in the test suite's build) makes the
same greedy tokens, and the cost figures are the runner's own. No timing asserted."""

from __future__ import annotations

import math

import pytest

from loomterm.bench.llamacpp import LLAMACPP, llamacpp_rows
from loomterm.bench.runner import BenchPlan

PLAN = BenchPlan.quick().scaled(
    llama_doc=300,
    prompt_tokens=48,
    decode_tokens=16,
    decode_reps=1,
    edit_reps=1,
    sibling_tokens=6,
    rerope_edits=2,
    switch_tokens=700,
    switch_ctx=512,
    long_reps=1,
)


@pytest.fixture(scope="module")
def rows(llama_build, binding, default_gguf):
    from loomterm.bench import corpus_text
    from loomterm.engine.models.load import load_model

    loaded = load_model(None, device="cpu", dtype="float32")
    corpus = list(loaded.tokenizer(corpus_text(), add_special_tokens=False)["input_ids"])
    return {row.name: row for row in llamacpp_rows(loaded, corpus, PLAN, lambda _line: None)}


def test_every_row_is_measured(rows):
    names = list(rows)
    for start in (
        "decode only vs llama-server",
        "torch runner (same prompt)",
        "truncate at 300",
        "branch switch at 300",
        "4 siblings in one generation",
        "fast splice KL",
        "fast splice vs exact",
        "llama.cpp's own batch",
        "drafting: a 5-token verify pass",
        "branch switch @700, same window",
        "branch switch @",
        "KV reserved at start vs the whole context",
        "KV reserved after 1,200 tokens",
        "one growth step vs evaluating",
        "decode after growing vs a context made whole",
    ):
        assert any(name.startswith(start) for name in names), (start, names)
    assert any("across a window shift" in name for name in names)
    for row in rows.values():
        assert row.section == LLAMACPP and "unavailable" not in row.extra, row
        assert math.isfinite(row.loomterm) and math.isfinite(row.baseline), row


def test_llama_server_makes_the_same_greedy_tokens(rows):
    row = rows["decode only vs llama-server"]
    assert row.extra["same_tokens"] is True, (row.note, row.extra)


def test_figures_are_the_runners_own(rows):
    kl = next(row for name, row in rows.items() if name.startswith("fast splice KL"))
    assert 0 < kl.loomterm <= 0.05
    same = next(row for name, row in rows.items() if name.endswith("same window, n_ctx 512"))
    # Only the sibling's own tokens are evaluated, and the result is a fresh evaluation's.
    assert same.extra["evaluated"] <= 33 < same.extra["window"]
    assert same.extra["kl"] < 0.01
    start = rows["KV reserved at start vs the whole context"]
    assert start.loomterm * 10 < start.baseline  # 256 cells of the whole context's 16,384
    grown = next(row for name, row in rows.items() if name.startswith("KV reserved after"))
    assert grown.extra["growths"] >= 1 and start.loomterm < grown.loomterm < grown.baseline
    drafting = next(row for name, row in rows.items() if name.startswith("drafting"))
    assert drafting.note.startswith("not run: drafted decoding runs on the torch runner")
