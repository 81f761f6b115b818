"""The llama.cpp runner (``--backend llama.cpp``) beside the torch runner and llama-server,
on the same GGUF file and threads, in one run.

- decode: greedy tokens per second, decode only, against llama-server's own ``timings``
  (``predicted_per_second``, measured inside the server), with a check that both made
  the same tokens; the torch runner's rate on the same prompt beside them;
- truncate and branch switch on a ~1,000-token path, against a fresh llama.cpp
  evaluation of the resulting path (its own one-sequence context);
- 4 siblings in one generation (one batch a step, or one decode each where that has
  cost less: ``batching``) against 4 sequential generations;
- fast splice: KL of the next-token distribution to a fresh (exact) evaluation of the
  spliced path, and its time against an exact splice;
- llama.cpp's own batch, the ceiling of the siblings row: one ``llama_decode`` of one
  token in each of 4 sequences against 4 single-token decodes;
- drafting (the torch runner's; this runner says why not): what one verify pass of 4
  drafted tokens costs against 5 plain steps, the most drafting could gain here;
- long documents: branch switches on a path past ``n_ctx``, in the same window and
  across a window shift, against a fresh evaluation of the target's window;
- memory: the KV the context reserves at start and after a 4,000-token document and a
  generation, against the whole context the runner used to reserve at start; one growth
  step against evaluating the document again; the decode rate after growing against a
  context made whole at start.
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
        why = f"llama.cpp is not built: run `{peer.BUILD_HINT}` (about 15 minutes on 2 cores)"
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
    prompt = corpus[: plan.prompt_tokens]
    try:
        rows = _decode(loaded, loom, gguf, prompt, plan.decode_tokens, plan.decode_reps, label, log)
        rows += _edits(loom, fresh, doc, plan.edit_reps, label, log)
        rows += _siblings(loom, prompt, plan.sibling_tokens, label, log)
        rows += _splice(loom, fresh, doc, plan.rerope_edits, label, log)
    finally:
        runner.close()
        fresh.close()
    why = runner.capabilities.reason("drafting")
    rows += _kernel_rows(gguf, prompt, threads, label, why, log)
    n_ctx = plan.switch_ctx or 2048
    rows += _window_rows(gguf, corpus, plan.switch_tokens, n_ctx, plan.long_reps, threads, log)
    if plan.llama_doc >= 1000:
        rows += growth_rows(gguf, corpus, threads, log, reps=plan.decode_reps + 2)
    else:  # a sized-down plan: a shorter document into a smaller first context
        rows += growth_rows(gguf, corpus, threads, log, 4 * plan.llama_doc, 256, 1)
    return rows


GROWTH_DOC = 4000  # tokens of the document the memory rows load
GROWTH_NEW = 32  # tokens each of 4 siblings generates after it (and greedy ones, timed)


def growth_rows(
    gguf, corpus: list[int], threads: int, log, length: int = GROWTH_DOC, first: int = 0, reps=5
) -> list[Row]:
    """The context's KV at start and after a 4,000-token document and 4 siblings (the
    runner's default ``n_ctx``: the trained context), one growth step, and the decode
    rate after growing against a runner whose context was made whole at start (the old
    reservation; the two runners take turns). ``first``: the first context's cells (0: the
    runner's default)."""
    from loomterm.engine import Loom
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    log(f"llama.cpp runner: KV growth over a {length:,}-token document")
    mib = 1 << 20
    doc = _wrapped(corpus, 0, length)
    sized = {"first_cells": first} if first else {}
    small = Loom(LlamaCppRunner(gguf, threads=threads, **sized))
    runner = small.runner
    try:
        most = runner.llama.max_cells * runner.bytes_per_cell
        first = runner.kv_bytes().working
        start = time.perf_counter()
        node = small.append_tokens(small.root, doc)
        prefill = time.perf_counter() - start
        small.generate(node, GROWTH_NEW, n=4, seed=0, temperature=1.0)
        after, cells, growths = runner.kv_bytes().working, runner.llama.cells, runner.growths
        step = runner.grow_seconds / max(1, growths)
        whole = Loom(LlamaCppRunner(gguf, threads=threads, first_cells=runner.llama.max_cells))
        try:
            other = whole.append_tokens(whole.root, doc)
            rates: dict[str, list[float]] = {"grown": [], "whole": []}
            for _ in range(max(1, reps)):
                for name, loom, at in (("grown", small, node), ("whole", whole, other)):
                    clock = time.perf_counter()
                    kid = loom.generate(at, GROWTH_NEW, temperature=0)[0]
                    rates[name].append(len(kid.tokens) / (time.perf_counter() - clock))
        finally:
            whole.runner.close()
    finally:
        runner.close()
    grown, made = statistics.median(rates["grown"]), statistics.median(rates["whole"])
    where = f"{gguf.name}, n_ctx {runner.n_ctx:,}"
    return [
        Row(LLAMACPP, "KV reserved at start vs the whole context", most / mib, first / mib,
            "MiB", ratio(first, most), note=f"{where}; the whole context is what it used to "
            "reserve at start"),
        Row(LLAMACPP, f"KV reserved after {length:,} tokens and 4 siblings of {GROWTH_NEW}",
            most / mib, after / mib, "MiB", ratio(after, most),
            note=f"{cells:,} cells after {growths} growth steps",
            extra={"cells": cells, "growths": growths}),
        Row(LLAMACPP, "one growth step vs evaluating the document again", prefill, step, "s",
            speedup(prefill, step), note=f"{where}; every sequence moved to the larger context"),
        Row(LLAMACPP, "decode after growing vs a context made whole at start", made, grown,
            "tok/s", ratio(grown, made), note=f"{where}; {GROWTH_NEW} greedy tokens, median "
            f"of {max(1, reps)}"),
    ]  # fmt: skip


def _decode(loaded, loom, gguf, prompt, new_tokens, reps, label, log) -> list[Row]:
    log(f"llama.cpp runner: decode {new_tokens} tokens after {len(prompt)}")
    node = loom.append_tokens(loom.root, prompt)
    # The warm-up evaluates the whole prompt in one batch, as llama-server does: its
    # tokens are the ones compared. The timed runs reuse the prompt's cells and evaluate
    # its last token alone (as llama-server's prompt cache would), which can round apart.
    tokens = list(loom.generate(node, new_tokens, temperature=0)[0].tokens)
    rates = []
    for _ in range(max(1, reps)):
        loom.generate(node, new_tokens, temperature=0)
        rates.append(loom.last_result.tokens_per_second)
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
        theirs = list(server[-1].tokens_made)  # a tuple: compared as a list
        n = min(len(theirs), len(tokens))
        same = theirs[:n] == tokens[:n]
        first = next((i for i in range(n) if theirs[i] != tokens[i]), None)
        extra.update(tokens=tokens, server_tokens=theirs, first_difference=first)
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
    costs = loom.runner.batching  # how the siblings' steps went to llama.cpp
    batch, single = costs.batch.get(4), costs.single
    fed = (
        "one batch"
        if single is None or (batch is not None and batch <= single)
        else "one decode each"
    )
    measured = ", ".join(
        f"{name} {1e3 * cost:.1f} ms/token"
        for name, cost in (("batch", batch), ("single", single))
        if cost is not None
    )
    return [
        Row(LLAMACPP, "4 siblings in one generation vs four sequential", per_apart, per_together,
            "s/tok", speedup(per_apart, per_together), ">=2",
            note=f"{label}; fed to llama.cpp as {fed} a step ({measured})",
            extra={"batch_s_per_token": batch, "single_s_per_token": single}),
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


def _pass_seconds(llama, rows: list[tuple[int, int, int]], reps: int = 15) -> float:
    """Median time of one ``llama_decode`` of ``rows`` (token, position, sequence), each
    timed from the same cache (the new cells are removed after each)."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        llama.decode_rows(rows)
        times.append(time.perf_counter() - start)
        for seq in {seq for _t, _p, seq in rows}:
            llama.seq_rm(seq, min(p for _t, p, s in rows if s == seq))
    return statistics.median(times)


def _kernel_rows(gguf, prompt: list[int], threads: int, label: str, why: str, log) -> list[Row]:
    """llama.cpp's own costs behind the siblings and drafting rows, in a context of its
    own: one token in each of 4 sequences in one batch, and 5 tokens of one sequence."""
    from loomterm.engine.llamacpp.context import LlamaContext

    log("llama.cpp runner: llama.cpp's own batch costs (4 sequences; a 5-token pass)")
    width, start = 4, len(prompt)
    llama = LlamaContext(gguf, cells=1024, n_seq=width, threads=threads)
    try:
        llama.decode(prompt, 0, 0)
        for seq in range(1, width):
            llama.seq_cp(0, seq)
        rows = [(prompt[seq], start, seq) for seq in range(width)]
        one = _pass_seconds(llama, rows[:1])
        batch = _pass_seconds(llama, rows)
        chain = _pass_seconds(llama, [(prompt[i], start + i, 0) for i in range(5)])
    finally:
        llama.close()
    return [
        Row(LLAMACPP, f"llama.cpp's own batch: {width} sequences' tokens vs {width} single decodes",
            width * one, batch, "s", speedup(width * one, batch), "",
            note=f"{label}; the ceiling of the siblings row",
            extra={"one_s": one, "batch_s": batch}),
        Row(LLAMACPP, "drafting: a 5-token verify pass vs 5 plain steps", 5 * one, chain, "s",
            speedup(5 * one, chain), "",
            note=f"not run: {why}; the most drafting could gain here, every draft accepted",
            extra={"one_s": one, "pass_s": chain}),
    ]  # fmt: skip


def _wrapped(corpus: list[int], start: int, count: int) -> list[int]:
    """``count`` corpus tokens from ``start`` on, wrapping around."""
    return [corpus[(start + i) % len(corpus)] for i in range(count)]


def _window_rows(gguf, corpus, length: int, n_ctx: int, reps: int, threads: int, log):
    """Branch switches at the end of a ``length``-token path past ``n_ctx`` (as the long
    documents section's torch rows): two siblings in the same window, and two on either
    side of a window shift; baseline: a fresh evaluation of the target's window."""
    from loomterm.engine import Loom
    from loomterm.engine.llamacpp.context import LlamaContext
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    log(f"llama.cpp runner: branch switches at {length:,} tokens past n_ctx {n_ctx:,}")
    fresh = LlamaContext(gguf, cells=n_ctx, n_seq=1, threads=threads)
    rows = []
    try:
        for how in ("same window", "across a window shift"):
            loom = Loom(LlamaCppRunner(gguf, n_ctx=n_ctx, threads=threads))
            try:
                main, other = _window_pair(loom, corpus, length, how)
                rows.append(_switch_row(loom, fresh, main, other, reps, how))
            finally:
                loom.runner.close()
    finally:
        fresh.close()
    return rows


def _window_pair(loom, corpus, length: int, how: str):
    """Two siblings past the window: both ending at ``length`` (same window), or one on
    the last shift boundary below it and one 16 tokens into the next window."""
    tail = 32
    if how == "same window":
        prefix = loom.append_tokens(loom.root, _wrapped(corpus, 0, length - tail))
        main = loom.append_tokens(prefix, _wrapped(corpus, length - tail, tail))
        return main, loom.append_tokens(prefix, _wrapped(corpus, length + 500, tail))
    window, n_ctx = loom.runner.window, loom.n_ctx
    edge = n_ctx + max(0, (length - n_ctx) // window.n_discard) * window.n_discard
    prefix = loom.append_tokens(loom.root, _wrapped(corpus, 0, edge - 16))
    main = loom.append_tokens(prefix, _wrapped(corpus, edge - 16, 16))
    return main, loom.append_tokens(prefix, _wrapped(corpus, edge + 500, 32))


def _switch_row(loom, fresh, main, other, reps: int, how: str) -> Row:
    times, base = [], []
    got = want = None
    for _ in range(max(1, reps)):
        loom.next_logits(main)
        counted, start = loom.runner.llama.evaluated, time.perf_counter()
        got = loom.next_logits(other)
        times.append(time.perf_counter() - start)
        counted = loom.runner.llama.evaluated - counted
    window = loom.runner.want(other).tokens  # what the model sees of the path
    for _ in range(max(1, reps)):
        fresh.seq_rm(0, -1, -1)
        start = time.perf_counter()
        want = fresh.decode(window, 0, 0)
        base.append(time.perf_counter() - start)
    kl = _kl(want, got)
    b, t = statistics.median(base), statistics.median(times)
    return Row(LLAMACPP, f"branch switch @{other.end:,}, {how}, n_ctx {loom.n_ctx:,}", b, t,
               "s", speedup(b, t), ">=10",
               note=f"{counted} of the window's {len(window)} tokens evaluated; KL to a fresh "
                    f"evaluation {kl:.2g} nats",
               extra={"window": len(window), "evaluated": counted, "kl": kl, "loom_s": times})  # fmt: skip
