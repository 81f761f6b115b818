"""The bench plan (``--quick`` or full) and the run that fills the table."""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import torch

from loomterm.bench import (
    contended,
    context,
    corpus_text,
    decoding,
    edits,
    files,
    healing,
    llamacpp,
    longdoc,
    precision,
    prefill,
    remote,
    search,
    startup,
    think_ahead,
    tree_map,
    weave,
)
from loomterm.bench.common import loom_options
from loomterm.bench.report import Row
from loomterm.engine.kernels import attention


@dataclass(frozen=True)
class BenchPlan:
    """How much to measure. ``quick`` fits in two minutes on a 2-core CPU with the
    default model; ``full`` is the issue's protocol."""

    lengths: tuple[int, ...] = (256, 1000, 2000)
    edit_reps: int = 5
    base_reps: int = 2
    decode_tokens: int = 128
    decode_reps: int = 3
    prompt_tokens: int = 64
    sibling_tokens: int = 32
    sibling_counts: tuple[int, ...] = (1, 4, 8)
    memory_counts: tuple[int, ...] = (1, 4, 8)
    rerope_doc: int = 512
    rerope_edits: int = 8
    draft_prompt: int = 160
    draft_tokens: int = 128
    draft_regens: int = 3
    sampled_seeds: int = 4
    sampled_tokens: int = 48
    prefill_tokens: int = 1024
    prefill_reps: int = 3
    precision_tokens: int = 128
    precision_doc: int = 512
    precision_reps: int = 3
    weave_shape: tuple[int, int, int] = (4, 3, 2)  # n, d, k
    weave_tokens: int = 16
    weave_reps: int = 2
    open_tokens: int = 8000  # the long session opened for its first token
    switch_tokens: int = 10000  # the path of the window-switch rows
    switch_ctx: int | None = None  # their n_ctx (None: the model's)
    long_reps: int = 2
    context_rounds: int = 6
    context_new: int = 32
    context_branches: int = 4
    llama_doc: int = 1000  # the llama.cpp runner's edit rows: a path this long
    startup_reps: int = 3  # launches of the editor timed (after one to warm up)
    files_nodes: int = 100_000  # the wide tree imported and exported (and a tenth of it)
    files_depth: int = 10_000  # the deep path imported and exported (and a tenth of it)
    map_depth: int = 7  # the tree map's complete tree: 4 children a node, 21,845 nodes
    map_reps: int = 20
    heal_cuts: int = 200  # words of the corpus cut in the middle (token healing)
    heal_tokens: int = 8  # greedy tokens after each cut
    ahead_words: int = 8  # words typed a key at a time as thinking ahead begins
    ahead_tokens: int = 48  # max_new_tokens of the think-ahead rows
    sections: tuple[str, ...] = (
        "latency", "decode", "precision", "siblings", "memory", "prefill", "long", "rerope",
        "drafted",
        "healing",
        "weave",
        "search",
        "context",
        "llamacpp",
        "busy",
        "startup",
        "files",
        "map",
        "ahead",
    )  # fmt: skip

    @classmethod
    def full(cls, device: torch.device) -> BenchPlan:
        lengths = (256, 1000, 2000, 4000) if device.type == "cuda" else (256, 1000, 2000)
        return cls(lengths=lengths)

    @classmethod
    def quick(cls) -> BenchPlan:
        return cls(
            lengths=(256, 1000),
            edit_reps=2,
            base_reps=1,
            decode_tokens=48,
            decode_reps=1,
            sibling_tokens=8,
            sibling_counts=(1, 4, 8),
            memory_counts=(1, 4, 8),
            rerope_doc=256,
            rerope_edits=4,
            draft_prompt=128,
            draft_tokens=48,
            draft_regens=2,
            sampled_seeds=3,
            sampled_tokens=32,
            prefill_tokens=512,
            prefill_reps=2,
            precision_tokens=32,
            precision_doc=256,
            precision_reps=3,
            weave_reps=1,
            switch_ctx=2048,  # the windows are ~1-2k tokens: the setup stays short
            long_reps=1,
            context_rounds=3,
            context_new=16,
            context_branches=3,
            startup_reps=2,
            files_nodes=20_000,
            files_depth=5_000,  # smaller, the small tree fits in the CPU caches
            heal_cuts=40,
            ahead_words=5,
            ahead_tokens=24,
        )

    def scaled(self, **changes) -> BenchPlan:
        return replace(self, **changes)


NOTES = {
    edits.LATENCY: edits.LATENCY_NOTE,
    decoding.DECODE: decoding.DECODE_NOTE,
    precision.PRECISION: precision.PRECISION_NOTE,
    precision.PEER: precision.PEER_NOTE,
    decoding.SIBLINGS: decoding.SIBLINGS_NOTE,
    decoding.MEMORY: decoding.MEMORY_NOTE,
    prefill.PREFILL: prefill.PREFILL_NOTE,
    longdoc.LONG: longdoc.LONG_NOTE,
    edits.REROPE: edits.REROPE_NOTE,
    decoding.DRAFTED: decoding.DRAFTED_NOTE,
    healing.HEALING: healing.HEALING_NOTE,
    weave.WEAVE: weave.WEAVE_NOTE,
    search.SEARCH: search.SEARCH_NOTE,
    context.CONTEXT: context.CONTEXT_NOTE,
    llamacpp.LLAMACPP: llamacpp.LLAMACPP_NOTE,
    contended.CONTENDED: contended.CONTENDED_NOTE,
    startup.STARTUP: startup.STARTUP_NOTE,
    files.FILES: files.FILES_NOTE,
    tree_map.TREE_MAP: tree_map.TREE_MAP_NOTE,
    think_ahead.AHEAD: think_ahead.AHEAD_NOTE,
}
SERVER_NOTES = remote.NOTES  # the sections of a bench against a server


@dataclass
class BenchResult:
    rows: list[Row]
    meta: dict = field(default_factory=dict)

    def title(self) -> str:
        m = self.meta
        if m.get("server"):
            return (
                f"loomterm bench{' --quick' if m.get('quick') else ''}: {m['model']} on "
                f"{m['server']} at {m['device']}, {m['seconds']:.0f} s"
            )
        title = (
            f"loomterm bench{' --quick' if m.get('quick') else ''}: {m['model']} on "
            f"{m['device']} ({m['dtype']}), torch {m['torch']}, {m['threads']} threads, "
            f"{m['seconds']:.0f} s"
        )
        # Which attention the engine ran: loomterm's, or the model's own and why.
        return f"{title}\n{m['attention']}" if m.get("attention") else title


def run_bench(
    loaded,
    plan: BenchPlan,
    quick: bool = False,
    log: Callable[[str], None] | None = None,
    n_ctx: int | None = None,
    kv_budget: int | str | None = None,
) -> BenchResult:
    """Measure every section of ``plan`` on ``loaded`` (a ``LoadedModel``); every Loom
    it builds gets ``n_ctx`` and ``kv_budget`` (None: the engine's defaults)."""
    with loom_options(n_ctx=n_ctx, kv_budget=kv_budget):
        result = _run(loaded, plan, quick, log or (lambda text: None))
    result.meta.update(n_ctx=n_ctx, kv_budget=kv_budget)
    return result


def _run(loaded, plan: BenchPlan, quick: bool, log: Callable[[str], None]) -> BenchResult:
    started = time.perf_counter()
    inputs = _inputs(loaded, plan)
    rows: list[Row] = []
    want = set(plan.sections)
    for name, section in _SECTIONS:
        if name in want:
            rows += section(loaded, plan, inputs, log)
    meta = {
        "model": loaded.name,
        "attention": attention.describe(loaded.model),
        "device": str(loaded.device),
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "quick": quick,
        "plan": asdict(plan),
        "seconds": time.perf_counter() - started,
    }
    return BenchResult(rows, meta)


@dataclass(frozen=True)
class _Inputs:
    """The token runs the sections read: the corpus, the prompt (its start), and the
    drafted section's prompt (a later chapter, whose text repeats)."""

    corpus: list[int]
    prompt: list[int]
    draft_prompt: list[int]


def _inputs(loaded, plan: BenchPlan) -> _Inputs:
    corpus = list(loaded.tokenizer(corpus_text(), add_special_tokens=False)["input_ids"])
    start = corpus_text().index("III. A Morning")
    draft_prompt = list(
        loaded.tokenizer(corpus_text()[start:], add_special_tokens=False)["input_ids"]
    )[: plan.draft_prompt]
    return _Inputs(corpus, corpus[: plan.prompt_tokens], draft_prompt)


def _long_rows(loaded, plan: BenchPlan, inputs: _Inputs, log) -> list[Row]:
    corpus = inputs.corpus
    rows = longdoc.open_first_token(loaded, corpus, plan.open_tokens, plan.long_reps, log)
    why = " (lowered from the model's to keep --quick short)" if plan.switch_ctx else ""
    return rows + longdoc.window_switch(
        loaded, corpus, plan.switch_tokens, plan.switch_ctx, plan.long_reps, log, why
    )


# Every section, in the order the table lists them: (name, rows of the section).
_SECTIONS: tuple[tuple[str, Callable[..., list[Row]]], ...] = (
    ("latency", lambda loaded, plan, inputs, log: edits.edit_latency(
        loaded, inputs.corpus, list(plan.lengths), plan.edit_reps, plan.base_reps, log)),
    ("decode", lambda loaded, plan, inputs, log: decoding.plain_decode(
        loaded, inputs.prompt, plan.decode_tokens, plan.decode_reps, log)),
    ("precision", lambda loaded, plan, inputs, log: precision.precision_table(
        loaded, inputs.prompt, inputs.corpus[: plan.precision_doc], plan.precision_tokens,
        plan.precision_reps, log)),
    ("siblings", lambda loaded, plan, inputs, log: decoding.siblings(
        loaded, inputs.prompt, plan.sibling_tokens, list(plan.sibling_counts), log)),
    ("memory", lambda loaded, plan, inputs, log: decoding.kv_memory(
        loaded, inputs.prompt, plan.sibling_tokens, list(plan.memory_counts), log)),
    ("prefill", lambda loaded, plan, inputs, log: prefill.record_cost(
        loaded, inputs.corpus, plan.prefill_tokens, plan.prefill_reps, log)),
    ("long", _long_rows),
    ("rerope", lambda loaded, plan, inputs, log: edits.rerope_quality(
        loaded, inputs.corpus, plan.rerope_doc, plan.rerope_edits, log)),
    ("drafted", lambda loaded, plan, inputs, log: decoding.drafted(
        loaded, inputs.draft_prompt, plan.draft_tokens, plan.draft_regens, plan.sampled_seeds,
        log, sampled_tokens=plan.sampled_tokens)),
    ("weave", lambda loaded, plan, inputs, log: weave.weave_rows(
        loaded, inputs.prompt, *plan.weave_shape, plan.weave_tokens, plan.weave_reps, log)),
    ("search", lambda loaded, plan, inputs, log: search.search_rows(
        loaded, inputs.corpus, 3, log)),
    ("context", lambda loaded, plan, inputs, log: context.context_rows(
        loaded, inputs.corpus, plan.context_rounds, plan.context_new, plan.context_branches,
        log)),
    ("llamacpp", lambda loaded, plan, inputs, log: llamacpp.llamacpp_rows(
        loaded, inputs.corpus, plan, log)),
    ("busy", lambda loaded, plan, inputs, log: contended.contended_rows(
        loaded, inputs.prompt, plan.decode_tokens, plan.decode_reps, log)),
    ("startup", lambda loaded, plan, inputs, log: startup.startup_rows(
        loaded, inputs.corpus, plan.startup_reps, log)),
    ("files", lambda loaded, plan, inputs, log: files.files_rows(
        plan.files_nodes, plan.files_depth, log)),
    ("map", lambda loaded, plan, inputs, log: tree_map.tree_map_rows(
        plan.map_depth, plan.map_reps, log)),
    ("healing", lambda loaded, plan, inputs, log: healing.healing_rows(
        loaded, corpus_text(), plan.heal_cuts, plan.heal_tokens, log)),
    ("ahead", lambda loaded, plan, inputs, log: think_ahead.think_ahead_rows(
        loaded, plan.ahead_words, plan.ahead_tokens, log)),
)  # fmt: skip


def run_server_bench(
    url: str, quick: bool = False, log: Callable[[str], None] | None = None, **server
) -> BenchResult:
    """The rows that apply to a server (``bench.remote``), on the server at ``url``."""
    from loomterm.engine import Loom

    log = log or (lambda text: None)
    started = time.perf_counter()
    loom = Loom.load(url, **server)
    plan = remote.RemotePlan.quick() if quick else remote.RemotePlan()
    rows = remote.run_remote_bench(loom, plan, log)
    runner = loom.runner
    meta = {
        "model": runner.name,
        "device": runner.where,
        "server": runner.identity()["server"]["kind"],
        "quick": quick,
        "plan": asdict(plan),
        "seconds": time.perf_counter() - started,
    }
    runner.close()
    return BenchResult(rows, meta)
