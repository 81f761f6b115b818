"""The llama.cpp runner (``--backend llama.cpp``) beside the torch runner and llama-server,
on the same GGUF file and threads, in one run.

- decode: greedy tokens per second, decode only, against llama-server's own ``timings``
  (``predicted_per_second``, measured inside the server), with a check that both made
  the same tokens; the torch runner's rate on the same prompt beside them;
- truncate and branch switch on a ~1,000-token path, against a fresh llama.cpp
  evaluation of the resulting path (its own one-sequence context);
- 4 siblings in one batch against 4 sequential generations;
- fast splice: KL of the next-token distribution to a fresh (exact) evaluation of the
  spliced path, and its time against an exact splice.
"""

from __future__ import annotations

import math
import statistics
import time

import torch

from loomterm.bench import peer
from loomterm.bench.common import make_loom
from loomterm.bench.report import Row, ratio, speedup

LLAMACPP = "llama.cpp runner"
LLAMACPP_NOTE = (
    "--backend llama.cpp, same GGUF and threads; baselines: llama-server's own timings, "
    "a fresh llama.cpp evaluation, sequential siblings, a fresh evaluation's distribution"
)


def llamacpp_rows(loaded, corpus: list[int], plan, log) -> list[Row]:
    """Every row this runner can run (see the module docstring), or one saying why not."""
    from loomterm.engine.llamacpp import binding

    threads = torch.get_num_threads()
    gguf = peer.gguf_of(loaded)
    why = None
    if gguf is None:
        why = "no GGUF file for this model"
    elif loaded.device.type != "cpu":
        why = f"llama.cpp is measured on the CPU, this run is on {loaded.device.type}"
    elif not binding.available():
        why = "llama.cpp is not built (python -m loomterm.serving.llama_build)"
    if why is not None:
        nan = float("nan")
        return [
            Row(LLAMACPP, "llama.cpp runner", nan, nan, "", nan, note=why,
                extra={"unavailable": why})
        ]  # fmt: skip
    from loomterm.engine import Loom
    from loomterm.engine.llamacpp.context import LlamaContext
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    doc = corpus[: plan.llama_doc]
    runner = LlamaCppRunner(gguf, n_ctx=2 * len(doc) + 256, threads=threads)
    fresh = LlamaContext(gguf, cells=2 * len(doc) + 256, n_seq=1, threads=threads)
    loom = Loom(runner)
    label = f"{gguf.name}, {threads} thread{'s' if threads > 1 else ''}"
    try:
        prompt = corpus[: plan.prompt_tokens]
        rows = _decode(loaded, loom, gguf, prompt, plan.decode_tokens, plan.decode_reps, label, log)
        rows += _edits(loom, fresh, doc, plan.edit_reps, label, log)
        rows += _siblings(loom, prompt, plan.sibling_tokens, label, log)
        rows += _splice(loom, fresh, doc, plan.rerope_edits, label, log)
    finally:
        runner.close()
        fresh.close()
    return rows


def _decode(loaded, loom, gguf, prompt, new_tokens, reps, label, log) -> list[Row]:
    log(f"llama.cpp runner: decode {new_tokens} tokens after {len(prompt)}")
    node = loom.append_tokens(loom.root, prompt)
    loom.generate(node, 4, temperature=0)  # warm-up
    rates, tokens = [], []
    for _ in range(max(1, reps)):
        kid = loom.generate(node, new_tokens, temperature=0)[0]
        rates.append(loom.last_result.tokens_per_second)
        tokens = list(kid.tokens)
    torch_loom = make_loom(loaded, drafting="off")
    torch_node = torch_loom.append_tokens(torch_loom.root, prompt)
    torch_rates = []
    for _ in range(max(1, reps)):
        torch_loom.generate(torch_node, new_tokens, temperature=0)
        torch_rates.append(torch_loom.last_result.tokens_per_second)
    server = peer.server_decode(gguf, prompt, new_tokens, torch.get_num_threads(), reps)
    nan = float("nan")
    extra: dict = {"runner_tok_s": rates}
    if isinstance(server, str):
        base, same, note = nan, None, server
        extra["unavailable"] = server
    else:
        base = max(run.decode_rate for run in server)
        theirs = server[-1].tokens_made
        n = min(len(theirs), len(tokens))
        same = theirs[:n] == tokens[:n]
        note = f"{label}; {'same greedy tokens' if same else 'TOKENS DIFFER'}"
    ours, torch_rate = max(rates), max(torch_rates)
    return [
        Row(LLAMACPP, "decode only vs llama-server", base, ours, "tok/s", ratio(ours, base),
            ">=0.9", note=note, extra={**extra, "same_tokens": same}),
        Row(LLAMACPP, "torch runner (same prompt) vs llama-server", base, torch_rate, "tok/s",
            ratio(torch_rate, base), note=f"{loaded.precision}",
            extra={"torch_tok_s": torch_rates, **({"unavailable": note} if math.isnan(base) else {})}),
    ]  # fmt: skip


def _fresh_seconds(fresh, tokens: list[int]) -> float:
    fresh.seq_rm(0, -1, -1)
    start = time.perf_counter()
    fresh.decode(tokens, 0, 0)
    return time.perf_counter() - start


def _edits(loom, fresh, doc, reps, label, log) -> list[Row]:
    """Truncate a ~1,000-token path, and switch between two branches after it."""
    log(f"llama.cpp runner: truncate and branch switch at {len(doc)} tokens")
    node = loom.append_tokens(loom.root, doc)
    loom.next_logits(node)
    truncate, base = [], []
    for rep in range(max(1, reps)):
        length = len(doc) - 16 * (rep + 1)
        start = time.perf_counter()
        cut = loom.truncate(node, length)
        loom.next_logits(cut)
        truncate.append(time.perf_counter() - start)
        base.append(_fresh_seconds(fresh, doc[:length]))
    a, b = loom.generate(node, 16, n=2, seed=1, temperature=1.0)
    switch, switch_base = [], []
    for _ in range(max(1, reps)):
        for target in (a, b):
            start = time.perf_counter()
            loom.next_logits(target)
            switch.append(time.perf_counter() - start)
        switch_base.append(_fresh_seconds(fresh, b.path_tokens()))
    t, f = statistics.median(truncate), statistics.median(base)
    s, g = statistics.median(switch), statistics.median(switch_base)
    return [
        Row(LLAMACPP, f"truncate at {len(doc)} tokens vs fresh evaluation", f, t, "s",
            speedup(f, t), ">=20", note=label),
        Row(LLAMACPP, f"branch switch at {len(doc)} tokens vs fresh evaluation", g, s, "s",
            speedup(g, s), ">=20", note="both branches held as sequences"),
    ]  # fmt: skip


def _siblings(loom, prompt, new_tokens, label, log) -> list[Row]:
    log(f"llama.cpp runner: 4 siblings of {new_tokens} tokens, batched and sequential")
    node = loom.append_tokens(loom.root, prompt)
    loom.next_logits(node)
    start = time.perf_counter()
    batched = loom.generate(node, new_tokens, n=4, seed=5, temperature=1.0)
    together = time.perf_counter() - start
    start = time.perf_counter()
    alone = [loom.generate(node, new_tokens, seed=6 + i, temperature=1.0)[0] for i in range(4)]
    apart = time.perf_counter() - start
    made = sum(len(k.tokens) for k in batched) or 1
    made_apart = sum(len(k.tokens) for k in alone) or 1
    per_together, per_apart = together / made, apart / made_apart
    return [
        Row(LLAMACPP, "4 siblings in one batch vs four sequential", per_apart, per_together,
            "s/tok", speedup(per_apart, per_together), ">=2", note=label),
    ]  # fmt: skip


def _kl(want: torch.Tensor, got: torch.Tensor) -> float:
    p, q = torch.log_softmax(want.double(), -1), torch.log_softmax(got.double(), -1)
    return float((p.exp() * (p - q)).sum())


def _splice(loom, fresh, doc, edits, label, log) -> list[Row]:
    """Fast splices in the first half of a ~1,000-token path: KL to a fresh evaluation
    of the spliced path, and time against the exact splice of the same edit."""
    log(f"llama.cpp runner: {edits} fast splices in a {len(doc)}-token path")
    node = loom.append_tokens(loom.root, doc)
    insert = doc[5:8]
    kls, fast, exact = [], [], []
    for i in range(max(1, edits)):
        at = 20 + i * (len(doc) // 2) // max(1, edits)
        loom.next_logits(node)  # the old path in a sequence again (a fast splice moves it)
        start = time.perf_counter()
        spliced = loom.splice_tokens(node, at, at + 1, insert)
        logits = loom.next_logits(spliced)
        fast.append(time.perf_counter() - start)
        assert not loom.is_exact(spliced), "the splice was not fast"
        fresh.seq_rm(0, -1, -1)
        kls.append(_kl(fresh.decode(spliced.path_tokens(), 0, 0), logits))
        start = time.perf_counter()
        exact_node = loom.splice_tokens(node, at, at + 1, insert, exact=True)
        loom.next_logits(exact_node)
        exact.append(time.perf_counter() - start)
    mean = statistics.mean(kls)
    nan = float("nan")
    f, e = statistics.median(fast), statistics.median(exact)
    return [
        Row(LLAMACPP, f"fast splice KL to exact, {len(doc)} tokens, mean", 0.0, mean, "nats",
            nan, "<=0.05", note=f"max {max(kls):.4f}", extra={"kl": kls}, absolute=True),
        Row(LLAMACPP, "fast splice vs exact splice", e, f, "s", speedup(e, f), "",
            note=label),
    ]  # fmt: skip
