"""Decoding figures: plain decode, batched siblings, sibling KV memory, drafted decoding."""

from __future__ import annotations

import torch

from loomterm.bench import regen
from loomterm.bench.common import fresh_transformers, make_loom
from loomterm.bench.report import Row, ratio
from loomterm.bench.timing import median, timed

DECODE = "Plain decode"
DECODE_NOTE = "greedy, prompt prefill included on both sides; baseline: generate() of the model freshly loaded by transformers"
SIBLINGS = "Siblings"
SIBLINGS_NOTE = "N sampled continuations in one batch; baseline: N sequential generations"
MEMORY = "KV memory"
MEMORY_NOTE = "resident KV of a prompt and N siblings; baseline: the ideal (prefix once + suffixes)"
DRAFTED = "Drafted decoding"
DRAFTED_NOTE = "regenerating as a loom user does; baseline: the same work with drafting off"


# -- plain decode -----------------------------------------------------------------------------
def plain_decode(loaded, prompt: list[int], new_tokens: int, reps: int, log) -> list[Row]:
    """``loom.generate`` against transformers' ``generate``: greedy, same prompt, both
    timed from the prompt's tokens (prefill included). The target row decodes plainly
    (drafting off); a second row shows the default settings (drafting auto)."""
    log(f"plain decode: {new_tokens} tokens after a {len(prompt)}-token prompt")
    with fresh_transformers(loaded) as model:
        return _plain_decode(loaded, model, prompt, new_tokens, reps)


def _plain_decode(loaded, model, prompt: list[int], new_tokens: int, reps: int) -> list[Row]:
    looms = {mode: make_loom(loaded, drafting=mode) for mode in ("off", "auto")}
    device = loaded.device
    ids = torch.tensor([prompt], device=device)  # (1, T)
    for loom in looms.values():
        loom.generate(loom.append_tokens(loom.root, prompt), 4, temperature=0)  # warm-up
    hf_generate(model, ids, 4)
    rates: dict[str, list[float]] = {"off": [], "auto": [], "hf": []}
    identical = {"off": True, "auto": True}
    for _ in range(reps):
        tokens = {}
        for mode, loom in looms.items():

            def ours(loom=loom):
                node = loom.append_tokens(loom.root, prompt)
                return loom.generate(node, new_tokens, temperature=0)[0]

            seconds, kid = timed(device, ours)
            rates[mode].append(len(kid.tokens) / seconds)
            tokens[mode] = list(kid.tokens)
        count = len(tokens["off"])
        seconds, out = timed(device, lambda count=count: hf_generate(model, ids, count))
        theirs = out[0, len(prompt) :].tolist()
        rates["hf"].append(len(theirs) / seconds)
        for mode in identical:
            identical[mode] = identical[mode] and tokens[mode] == theirs
    hf_rate = median(rates["hf"])
    rows = []
    for mode, name, target in (
        ("off", f"{new_tokens} new tokens", ">=1.1"),
        ("auto", f"{new_tokens} new tokens, default settings (drafting auto)", ""),
    ):
        rate = median(rates[mode])
        rows.append(
            Row(
                DECODE,
                name,
                hf_rate,
                rate,
                "tok/s",
                ratio(rate, hf_rate),
                target,
                note="identical tokens" if identical[mode] else "TOKENS DIFFER",
                extra={
                    "identical": identical[mode],
                    "loom_tok_s": rates[mode],
                    "hf_tok_s": rates["hf"],
                },
            )
        )
    return rows


@torch.inference_mode()
def hf_generate(model, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """transformers' own greedy ``generate`` on a freshly loaded model
    (:func:`~loomterm.bench.common.fresh_transformers`): (1, T + new)."""
    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        pad_token_id=model.generation_config.eos_token_id,
    )


# -- siblings and their memory ------------------------------------------------------------------
def siblings(loaded, prompt: list[int], new_tokens: int, counts: list[int], log) -> list[Row]:
    log(f"siblings: N = {counts}, {new_tokens} tokens each")
    loom = make_loom(loaded, drafting="off")
    device = loom.runner.device
    node = loom.append_tokens(loom.root, prompt)
    loom.generate(node, 2, n=2, temperature=1.0, seed=0)  # warm-up
    rows = []
    for n in counts:
        seconds, kids = timed(
            device, lambda n=n: loom.generate(node, new_tokens, n=n, temperature=1.0, seed=n)
        )
        batch_rate = sum(len(k.tokens) for k in kids) / seconds

        def sequential(n=n):
            return [
                loom.generate(node, new_tokens, temperature=1.0, seed=1000 + i)[0] for i in range(n)
            ]

        seconds, kids = timed(device, sequential)
        seq_rate = sum(len(k.tokens) for k in kids) / seconds
        rows.append(
            Row(
                SIBLINGS,
                f"N={n}",
                seq_rate,
                batch_rate,
                "tok/s",
                ratio(batch_rate, seq_rate),
                ">=3" if n == 8 else "",
            )
        )
    return rows


def kv_memory(loaded, prompt: list[int], new_tokens: int, counts: list[int], log) -> list[Row]:
    log(f"KV memory of N = {counts} siblings")
    rows = []
    for n in counts:
        loom = make_loom(loaded, drafting="off")
        node = loom.append_tokens(loom.root, prompt)
        kids = loom.generate(node, new_tokens, n=n, temperature=1.0, seed=n)
        per_token = node.kv[:, :, :, :1].numel() * node.kv.element_size()
        ideal = per_token * (node.end + sum(len(k.tokens) for k in kids))
        memory = loom.kv_bytes()
        mib = 1 << 20
        rows.append(
            Row(
                MEMORY,
                f"N={n}",
                ideal / mib,
                memory.total / mib,
                "MiB",
                ratio(memory.total, ideal),
                "<=1.1" if n >= 4 else "",
                note=f"of it working buffer {memory.working / mib:.1f} MiB",
                extra={"nodes": memory.nodes, "working": memory.working, "ideal": ideal},
            )
        )
    return rows


# -- drafted decoding ---------------------------------------------------------------------------
def drafted(
    loaded,
    prompt: list[int],
    new_tokens: int,
    regens: int,
    sampled_seeds: int,
    log,
    sampled_tokens: int | None = None,
) -> list[Row]:
    """The headline rows first: sampled regenerations, from the same point and after a
    mid-document edit (``regen``). Then greedy: generate once, regenerate ``regens``
    times from the same point (a replay of the sibling: the upper bound) and once after
    picking an alternative early on; with drafting off and on, compare."""
    rows: list[Row] = []
    if sampled_seeds:
        rows += regen.sampled_rows(
            DRAFTED, loaded, prompt, sampled_tokens or new_tokens, sampled_seeds, log
        )
    log(f"drafted decoding: {regens} greedy regenerations of {new_tokens} tokens")
    runs = {
        mode: _regeneration(loaded, prompt, new_tokens, regens, mode) for mode in ("off", "auto")
    }
    log("drafted decoding: first generation with lookahead decoding")
    look = _regeneration(loaded, prompt, new_tokens, 0, "lookahead")
    off, auto = runs["off"], runs["auto"]
    for key, name in (
        ("regen", f"upper bound (replay): greedy regenerate from the same point x{regens}"),
        ("pick", "regenerate after an alternative pick"),
        ("first", "first generation (no siblings yet)"),
    ):
        rows.append(_drafted_row(name, off[key], auto[key]))
    rows.append(_drafted_row("first generation, lookahead on", off["first"], look["first"]))
    replay = auto["regen"]["stats"]
    rows.append(
        Row(
            DRAFTED,
            "tokens per forward pass (greedy replay)",
            1.0,
            replay["tokens_per_step"],
            "tok",
            replay["tokens_per_step"],
            note=f"mean accepted drafts/step {replay['accepted_per_step']:.2f}",
        )
    )
    return rows


def _drafted_row(name: str, off: dict, drafted: dict) -> Row:
    """A drafted run's rate against the same run with drafting off, and whether it
    wrote the same tokens (``_regeneration``'s entries)."""
    same = off["tokens"] == drafted["tokens"]
    stats = drafted["stats"]
    return Row(
        DRAFTED,
        name,
        off["rate"],
        drafted["rate"],
        "tok/s",
        ratio(drafted["rate"], off["rate"]),
        note=("identical" if same else "OUTPUT DIFFERS")
        + f", {stats['accepted_per_step']:.2f} accepted/step",
        extra={"identical": same, **stats},
    )


def _regeneration(loaded, prompt, new_tokens, regens, mode) -> dict:
    loom = make_loom(loaded, drafting=mode)
    device = loom.runner.device
    node = loom.append_tokens(loom.root, prompt)
    out: dict = {}

    def run(key, nodes_and_counts):
        seconds, tokens, steps, accepted, emitted = 0.0, [], 0, 0, 0
        for parent, count in nodes_and_counts:
            took, (kid,) = timed(
                device, lambda p=parent, c=count: loom.generate(p, c, temperature=0)
            )
            seconds += took
            tokens.append(list(kid.tokens))  # a copy: later picks split the node
            stats = loom.last_result.drafting
            if stats is not None:
                steps, accepted, emitted = (
                    steps + stats.steps,
                    accepted + stats.accepted,
                    emitted + stats.emitted,
                )
        total = sum(len(t) for t in tokens)
        out[key] = {
            "rate": total / seconds,
            "tokens": tokens,
            "stats": {
                "steps": steps,
                "accepted": accepted,
                "accepted_per_step": accepted / steps if steps else 0.0,
                "tokens_per_step": emitted / steps if steps else 1.0,
                "seconds": seconds,
                "tokens": total,
            },
        }
        return tokens

    (first,) = run("first", [(node, new_tokens)])
    if regens:
        run("regen", [(node, new_tokens)] * regens)
        # Pick the runner-up token a few tokens in, then continue from there.
        kid = node.children[0]
        at = node.end + min(3, len(first) - 1)
        holder, offset = loom.tree.locate(kid, at)
        alternatives = holder.top[offset] or [(first[at - node.end], 0.0)]
        token = next((t for t, _ in alternatives if t != first[at - node.end]), alternatives[0][0])
        picked = loom.pick(kid, at, token)
        run("pick", [(picked, new_tokens - (at - node.end) - 1)])
    return out
