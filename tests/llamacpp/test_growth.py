"""The llama.cpp runner's context starts small and grows with the document: every
sequence moves into the larger context as it was (the same logits, bit for bit), cached
siblings and parked branches survive it, its KV figure is what llama.cpp allocated, and
a path past its largest size is the same one-line error as before."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from loomterm.engine import Loom
from loomterm.errors import LoomError
from tests.llamacpp.conftest import THREADS
from tests.llamacpp.test_budget import sampled
from tests.llamacpp.test_runner import PROMPT, evaluated, exact

WORDS = (
    "Movable type spread from Mainz along the Rhine, and within a generation presses "
    "stood in every trading city of Europe, printing bibles, grammars and broadsheets. "
)


def long_text(runner, tokens: int) -> str:
    """Text of about ``tokens`` tokens (never an end of sequence: plain prose)."""
    text = PROMPT + " " + WORDS
    while len(runner.encode(text, at_start=True)) < tokens:
        text += WORDS
    return text


def test_growth_moves_every_sequence_exactly(binding, default_gguf):
    """``LlamaContext.grow``: positions, shared prefixes and logits as they were."""
    from loomterm.engine.llamacpp.context import LlamaContext

    llama = LlamaContext(default_gguf, cells=512, n_seq=4, threads=THREADS)
    try:
        tokens = llama.tokenize(long_text_plain(), True)[:200]
        llama.decode(tokens, 0, 0)
        llama.seq_cp(0, 1)  # a sibling sharing all of sequence 0
        llama.decode(tokens[:30], 1, 200)
        llama.seq_cp(0, 2, 0, 120)  # a branch sharing its first 120 cells
        llama.decode(tokens[150:180], 2, 120)
        ends = {seq: llama.seq_pos_max(seq) for seq in range(3)}
        before = {seq: llama.decode([42], seq, ends[seq] + 1) for seq in range(3)}
        for seq in range(3):
            llama.seq_rm(seq, ends[seq] + 1)
        assert llama.grow(1024)
        assert llama.cells == 1024
        assert {seq: llama.seq_pos_max(seq) for seq in range(4)} == {**ends, 3: -1}
        for seq in range(3):
            assert torch.equal(llama.decode([42], seq, ends[seq] + 1), before[seq])
        # Shared cells moved shared: 200 + 30 + 30 cells fill 260 of 1024, so 760 more
        # fit; copies would take 200 + 230 + 150, and these would not.
        llama.decode((tokens * 4)[:760], 3, 0)
    finally:
        llama.close()


def long_text_plain() -> str:
    return PROMPT + " " + WORDS * 12


def continued(loom: Loom, node, fresh) -> None:
    """Append to ``node`` and check the continuation against a fresh evaluation: only
    the new tokens are evaluated, on top of ``node``'s cells (held or put back)."""
    before = evaluated(loom)
    child = loom.append(node, " and so")
    assert evaluated(loom) - before == len(child.tokens)
    exact(loom, child, fresh)


def test_the_context_starts_small_and_grows_with_the_document(binding, default_gguf, fresh):
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    runner = LlamaCppRunner(default_gguf, n_ctx=1024, threads=THREADS, first_cells=256)
    loom = Loom(runner)
    try:
        per_cell = runner.llama.kv_bytes_per_cell()
        assert runner.llama.cells == 256 and runner.llama.max_cells == 2048
        assert runner.kv_bytes().working == 256 * per_cell  # the old figure was 2048 cells
        node = loom.append(loom.root, long_text(runner, 400))  # a long append: 256 -> 512
        assert runner.growths == 1 and runner.llama.cells == 512
        assert runner.kv_bytes().working == 512 * per_cell
        exact(loom, node, fresh)
        kids = loom.generate(node, 150, n=2, seed=3, **sampled(runner))  # and a generation
        assert runner.llama.cells == 1024 and runner.growths == 2
        assert runner.kv_bytes().working == 1024 * per_cell and runner.evictions == 0
        for kid in kids:  # the siblings kept their sequences through the growth
            before = evaluated(loom)
            exact(loom, kid, fresh)
            assert evaluated(loom) == before
            continued(loom, kid, fresh)
        exact(loom, node, fresh)
    finally:
        runner.close()


def test_siblings_and_parked_branches_survive_growth(binding, default_gguf, fresh):
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    runner = LlamaCppRunner(default_gguf, n_ctx=1024, threads=THREADS, sequences=3, first_cells=256)
    loom = Loom(runner)
    try:
        node = loom.append(loom.root, PROMPT)
        free_running = sampled(runner)
        branches = [loom.generate(node, 60, seed=i, **free_running)[0] for i in range(4)]
        assert runner.parked.items and runner.llama.cells == 256  # parked before growing
        long = loom.append(node, " " + long_text(runner, 500))  # grows past 256 and 512
        assert runner.growths == 2 and runner.llama.cells == 1024
        exact(loom, long, fresh)

        def held(branch) -> bool:
            return any(s.tokens == branch.path_tokens() for s in runner.slots)

        kept = [b for b in branches if held(b)]
        parked = [b for b in branches if not held(b)]
        assert kept and len(parked) >= 2
        for branch in kept:  # held through the growth: its cells moved
            continued(loom, branch, fresh)
        for branch in parked:  # parked before the growth, put back into the larger cache
            if held(branch):  # (an earlier branch's restore may have brought it back)
                continue
            restores = runner.restores
            continued(loom, branch, fresh)
            assert runner.restores == restores + 1
        assert runner.growths == 2
    finally:
        runner.close()


def test_growth_past_the_largest_size_is_the_one_line_error(binding, default_gguf):
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    runner = LlamaCppRunner(
        default_gguf, n_ctx=256, threads=THREADS, cells=512, sequences=4, first_cells=256
    )
    loom = Loom(runner)
    try:
        node = loom.append(loom.root, PROMPT)
        with pytest.raises(LoomError) as caught:  # 4 siblings of 200 tokens need 800 cells
            loom.generate(node, 200, n=4, seed=1, **sampled(runner))
        message = str(caught.value)
        assert message.startswith("llama.cpp's cache of 512 tokens is full: ")
        assert "\n" not in message
        assert runner.growths == 1 and runner.llama.cells == 512
    finally:
        runner.close()


# Run in a child process: it listens to llama.cpp's log, which loomterm keeps quiet.
ALLOCATED = """
import ctypes, json, re, sys
from pathlib import Path
from loomterm.engine.llamacpp.context import LlamaContext

llama = LlamaContext(Path(sys.argv[1]), cells=256, n_seq=8, threads=1)
lines = []

@llama.lib.llama_log_callback
def listen(level, text, data):
    lines.append(text.decode("utf-8", "replace"))

llama.lib.llama_log_set(listen, ctypes.c_void_p(0))
assert llama.grow(int(sys.argv[2]))
mib = [float(m) for m in re.findall(r"KV buffer size = +([0-9.]+) MiB", "".join(lines))]
print(json.dumps({"cells": llama.cells, "per_cell": llama.kv_bytes_per_cell(), "mib": mib}))
"""


@pytest.mark.parametrize("model", ["default_gguf", "gemma_gguf"])
def test_the_kv_figure_is_what_llama_cpp_allocates(binding, model, request):
    """The figure the status bar shows is llama.cpp's own KV buffer (Gemma 3's
    sliding-window layers and wide heads included)."""
    gguf = request.getfixturevalue(model)
    done = subprocess.run(
        [sys.executable, "-c", ALLOCATED, str(gguf), "2048"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["cells"] == 2048 and facts["mib"]
    assert facts["cells"] * facts["per_cell"] == round(sum(facts["mib"]) * (1 << 20))
