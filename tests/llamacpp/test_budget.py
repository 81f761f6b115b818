"""The llama.cpp runner under ``--kv-budget``: the context sized to fit it, evicted
branches parked off the context (``llama_state_seq_*``) within what it leaves, coming
back without being evaluated again, and every figure checked against a fresh
evaluation of the same path."""

from __future__ import annotations

import pytest

from loomterm.engine import Loom
from loomterm.errors import InputError
from tests.llamacpp.conftest import THREADS
from tests.llamacpp.test_runner import PROMPT, evaluated, exact

BRANCH = 60  # new tokens per branch


def sampled(runner) -> dict:
    """Seeded sampling that never ends a branch early (its length is what is parked)."""
    return dict(temperature=1.0, logit_bias={str(t): "never" for t in runner.eos_ids})


def within_budget(runner) -> None:
    used = runner.kv_bytes()
    assert used.working == runner.llama.cells * runner.llama.kv_bytes_per_cell()
    assert used.nodes == runner.parked.nbytes
    assert used.total <= runner.kv_budget


def test_evicted_branches_are_parked_and_restored_within_the_budget(binding, default_gguf, fresh):
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    probe = LlamaCppRunner(default_gguf, n_ctx=256, threads=THREADS, cells=512, sequences=2)
    try:
        per_cell, context = probe.llama.kv_bytes_per_cell(), probe.context_bytes
        prompt_tokens = len(probe.encode(PROMPT, at_start=True))
    finally:
        probe.close()
    copy = (prompt_tokens + BRANCH) * per_cell  # about one parked branch
    budget = context + int(2.5 * copy)  # room for two copies, not three
    runner = LlamaCppRunner(
        default_gguf, n_ctx=256, threads=THREADS, cells=512, sequences=2, kv_budget=budget
    )
    loom = Loom(runner)
    try:
        assert runner.kv_budget == budget and runner.context_bytes == context
        node = loom.append(loom.root, PROMPT)
        free_running = sampled(runner)
        branches = []
        for i in range(5):  # two sequences: each new branch evicts the oldest one
            branches.append(loom.generate(node, BRANCH, seed=i, **free_running)[0])
            within_budget(runner)
        assert runner.evictions >= 3
        assert len(runner.parked.items) == 2 and runner.parked.dropped >= 1
        # The newest parked branch comes back as it was: nothing evaluated but its last
        # token (for the logits), and the same logits as a fresh evaluation.
        newest = max(runner.parked.items, key=lambda item: item.used)
        back = next(b for b in branches if b.path_tokens() == newest.record.tokens)
        before, restores = evaluated(loom), runner.restores
        exact(loom, back, fresh)
        assert runner.restores == restores + 1
        assert evaluated(loom) - before <= 1
        within_budget(runner)
        # The oldest copy went to keep within the budget: that branch is evaluated again.
        before = evaluated(loom)
        exact(loom, branches[0], fresh)
        assert runner.restores == restores + 1  # nothing to restore it from
        assert evaluated(loom) - before > BRANCH // 2  # (the siblings share a token or two)
        for branch in branches:
            exact(loom, branch, fresh)
            within_budget(runner)
    finally:
        runner.close()


def test_no_room_for_copies_drops_evicted_branches(binding, default_gguf, fresh):
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    probe = LlamaCppRunner(default_gguf, n_ctx=256, threads=THREADS, cells=512, sequences=2)
    context = probe.context_bytes
    probe.close()
    runner = LlamaCppRunner(
        default_gguf, n_ctx=256, threads=THREADS, cells=512, sequences=2, kv_budget=context
    )
    loom = Loom(runner)
    try:
        node = loom.append(loom.root, PROMPT)
        free_running = sampled(runner)
        branches = [loom.generate(node, 40, seed=i, **free_running)[0] for i in range(3)]
        assert runner.evictions >= 1 and not runner.parked.items
        assert runner.kv_bytes().total == context
        for branch in branches:
            exact(loom, branch, fresh)
    finally:
        runner.close()


def test_the_budget_sizes_the_context(binding, default_gguf):
    loom = Loom.load(model=str(default_gguf), backend="llama.cpp", n_ctx=256, threads=THREADS)
    per_cell = loom.runner.llama.kv_bytes_per_cell()
    assert loom.runner.llama.cells == 512  # the window twice, by default
    loom.runner.close()
    budget = 300 * per_cell  # room for 256 cells (llama.cpp allocates 256 at a time)
    loom = Loom.load(
        model=str(default_gguf), backend="llama.cpp", n_ctx=256, threads=THREADS, kv_budget=budget
    )
    try:
        assert loom.runner.kv_budget == budget and loom.runner.llama.cells == 256
        assert loom.kv_bytes().total <= budget
        node = loom.append(loom.root, PROMPT)
        assert len(loom.generate(node, 8, temperature=0)[0].tokens) == 8
    finally:
        loom.runner.close()
    with pytest.raises(
        InputError, match=r"^--kv-budget 1\.0 MiB holds \d+ tokens .* lower --n-ctx$"
    ):
        Loom.load(model=str(default_gguf), backend="llama.cpp", n_ctx=256, kv_budget="1M")
