"""The precision table: what each precision mode costs and gives, against float32.

Each mode (float32, bfloat16, float16, int8 and int4 weights) is loaded from the same
source and measured in the same run on the same work:

- decode: a fresh copy of the prompt, then plain greedy decoding (drafting off); the
  prompt's prefill is included, as in the plain decode section;
- prefill: a fresh path of ``doc`` corpus tokens until its next-token logits;
- fidelity: one forward pass over those corpus tokens with every position's logits;
  per position, KL(float32 || mode) of the next-token distributions (mean and p90)
  and whether the most likely token is the same (top-1 agreement).

The last rows set f16's and int8's decode against transformers' own ``generate`` in
float32 on the same prompt, the model freshly loaded by transformers (int8's is the
issue's target). Then the peer rows: llama.cpp on the GGUF file the model came from
(``peer``), against loomterm's float32, f16, int8 and int4.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass

import torch

from loomterm.bench import peer
from loomterm.bench.common import fresh_transformers, make_loom
from loomterm.bench.decoding import hf_generate
from loomterm.bench.report import Row, ratio
from loomterm.bench.timing import percentile, timed

PRECISION = "Precision"
PRECISION_NOTE = (
    "each mode against float32, same run, best of the repetitions; decode: greedy, drafting off"
)
PEER = "Peer"
PEER_NOTE = "llama.cpp's greedy decode of the same GGUF file, same threads, best of the repetitions"


@dataclass(frozen=True)
class Mode:
    label: str
    dtype: str
    quant: str


MODES = (
    Mode("float32", "float32", "none"),
    Mode("bfloat16", "bfloat16", "none"),
    Mode("f16", "auto", "f16"),  # float16 weights, float32 products (fbgemm on x86)
    Mode("int8", "auto", "int8"),  # activations: float32 on a CPU, bfloat16 on a GPU
    Mode("int4", "auto", "int4"),  # groups of 32, as llama.cpp's Q4_1
)


def precision_table(
    loaded, prompt: list[int], doc: list[int], new_tokens: int, reps: int, log
) -> list[Row]:
    log(
        f"precision: {', '.join(m.label for m in MODES)}; {new_tokens} tokens, {len(doc)}-token doc"
    )
    models = _mode_models(loaded)
    looms = {label: make_loom(m, drafting="off") for label, m in models.items()}
    for loom in looms.values():  # warm-up
        loom.generate(loom.append_tokens(loom.root, prompt), 2, temperature=0)
    rates = _mode_rates(looms, models["float32"], prompt, doc, new_tokens, reps)
    want = _logprobs(models["float32"], doc)
    rows: list[Row] = []
    for mode in MODES[1:]:
        rows += _mode_rows(mode, models[mode.label], want, doc, rates)
    hf_rate = best(rates.hf)
    for label, target in (("f16", ""), ("int8", ">=2.0")):
        rate = best(rates.decode[label])
        rows.append(
            Row(PRECISION, f"{label} decode vs transformers generate (float32)", hf_rate, rate,
                "tok/s", ratio(rate, hf_rate), target,
                note="prompt prefill included on both sides",
                extra={"hf_tok_s": rates.hf, f"{label}_tok_s": rates.decode[label]})
        )  # fmt: skip
    log("peer: llama.cpp on the same GGUF file")
    rows += _peer_rows(loaded, prompt, new_tokens, reps, rates.decode, rates.only)
    return rows


def _mode_models(loaded) -> dict:
    """A model per precision mode, by label: ``loaded`` itself for its own mode."""
    from loomterm.engine.models.load import load_model

    models = {}
    for mode in MODES:
        if _is(loaded, mode):
            models[mode.label] = loaded
        else:
            models[mode.label] = load_model(
                loaded.source, device=loaded.device, dtype=mode.dtype, quant=mode.quant
            )
    return models


@dataclass
class _Rates:
    """Tokens a second per mode label, one value per repetition: decoding with its
    prompt's prefill (``decode``), without it (``only``), and the document's prefill;
    ``hf``: transformers' own generate on the float32 model."""

    decode: dict[str, list[float]]
    prefill: dict[str, list[float]]
    only: dict[str, list[float]]
    hf: list[float]


def _mode_rates(looms, reference, prompt, doc, new_tokens: int, reps: int) -> _Rates:
    """Time every mode's decoding and prefill, and transformers' generate, ``reps``
    times, the modes interleaved so that a busy moment hits them alike."""
    ids = torch.tensor([prompt], device=reference.device)
    transformers_side = contextlib.ExitStack()  # the fresh model, freed after the loop
    hf_model = transformers_side.enter_context(fresh_transformers(reference, torch.float32))
    hf_generate(hf_model, ids, 2)
    rates = _Rates({label: [] for label in looms}, {label: [] for label in looms},
                   {label: [] for label in looms}, [])  # fmt: skip
    for _ in range(reps):
        for label, loom in looms.items():

            def ours(loom=loom):
                node = loom.append_tokens(loom.root, prompt)
                return loom.generate(node, new_tokens, temperature=0)[0]

            seconds, kid = timed(loom.runner.device, ours)
            rates.decode[label].append(len(kid.tokens) / seconds)
            rates.only[label].append(len(kid.tokens) / max(loom.last_result.decode_seconds, 1e-9))
            seconds, _ = timed(
                loom.runner.device,
                lambda loom=loom: loom.next_logits(loom.append_tokens(loom.root, doc)),
            )
            rates.prefill[label].append(len(doc) / seconds)
        seconds, out = timed(reference.device, lambda: hf_generate(hf_model, ids, new_tokens))
        rates.hf.append((out.shape[1] - len(prompt)) / seconds)
    transformers_side.close()
    return rates


def _mode_rows(mode, model, want: torch.Tensor, doc: list[int], rates: _Rates) -> list[Row]:
    """One mode's rows: its speed against float32's, and its fidelity (KL to the
    float32 log-probabilities ``want`` over ``doc``, top-1 agreement)."""
    label, name = mode.label, model.precision
    decode, prefill = rates.decode, rates.prefill
    base_decode, base_prefill = best(decode["float32"]), best(prefill["float32"])
    got = _logprobs(model, doc)
    kl = (want.exp() * (want - got)).sum(-1).tolist()  # (T,)
    agree = 100 * float((got.argmax(-1) == want.argmax(-1)).float().mean())
    rate, fill = best(decode[label]), best(prefill[label])
    mean_kl = sum(kl) / len(kl)
    target = "<=0.005" if mode.quant == "int8" else ""
    mode_rows = [
        Row(PRECISION, f"{name}: decode", base_decode, rate, "tok/s", ratio(rate, base_decode),
            extra={"tok_s": decode[label], "float32_tok_s": decode["float32"]}),
        Row(PRECISION, f"{name}: prefill @{len(doc)}", base_prefill, fill, "tok/s",
            ratio(fill, base_prefill)),
        Row(PRECISION, f"{name}: KL to float32, mean", 0.0, mean_kl, "nats", float("nan"),
            target, absolute=True, extra={"kl": kl}),
        Row(PRECISION, f"{name}: KL to float32, p90", 0.0, percentile(kl, 0.9), "nats",
            float("nan"), absolute=True),
        Row(PRECISION, f"{name}: top-1 agreement with float32", 100.0, agree, "%",
            agree / 100),
    ]  # fmt: skip
    if mode.quant != "none":  # what decoding sees: the int8 kernel, few rows a pass
        short = _logprobs(model, doc, chunk=DECODE_CHUNK)
        kl_short = (want.exp() * (want - short)).sum(-1).tolist()
        passes = f"{name}: KL to float32, mean, {DECODE_CHUNK}-token passes"
        mode_rows.insert(3, Row(PRECISION, passes, 0.0, sum(kl_short) / len(kl_short),
                                "nats", float("nan"), target, absolute=True,
                                note="the decode kernel"))  # fmt: skip
    return mode_rows


def _peer_rows(loaded, prompt, new_tokens, reps, decode, only) -> list[Row]:
    """llama.cpp's greedy decode of the model's GGUF file against loomterm's float32
    and int8, with and without the prompt's evaluation (``peer``)."""
    gguf = peer.gguf_of(loaded)
    threads = torch.get_num_threads()
    runs = "no GGUF file for this model" if gguf is None else None
    if runs is None and loaded.device.type != "cpu":
        runs = f"llama.cpp is measured on the CPU, this run is on {loaded.device.type}"
    if runs is None:
        runs = peer.measure(gguf, prompt, new_tokens, threads, max(1, reps))
    if isinstance(runs, str):
        nan = float("nan")
        return [Row(PEER, "llama.cpp decode", nan, nan, "tok/s", nan, note=runs,
                    extra={"unavailable": runs})]  # fmt: skip
    label = f"{gguf.name}, {threads} thread{'s' if threads > 1 else ''}"
    rows = []
    for mode, target in (("float32", ""), ("f16", ""), ("int8", ">=1.0"), ("int4", ">=1.0")):
        for what, ours, theirs in (
            ("prompt prefill included", decode[mode], [r.rate for r in runs]),
            ("decode only", only[mode], [r.decode_rate for r in runs]),
        ):
            rate, base = best(ours), best(theirs)
            rows.append(
                Row(PEER, f"loomterm {mode} vs llama.cpp, {what}", base, rate, "tok/s",
                    ratio(rate, base), target if what == "decode only" else "",
                    note=label, extra={"llama_cpp_tok_s": theirs, "loomterm_tok_s": ours})
            )  # fmt: skip
    return rows


def best(rates: list[float]) -> float:
    """The fastest of the repetitions. On a shared machine other work only ever slows a
    run down, so the least disturbed one is the steadiest estimate (and each side of a
    ratio gets the same treatment)."""
    return max(rates) if rates else float("nan")


def _is(loaded, mode: Mode) -> bool:
    from loomterm.engine.models.load import resolve_dtype

    return loaded.quant == mode.quant and loaded.dtype == resolve_dtype(mode.dtype, loaded.device)


# Passes this short run every int8 product through the int8 kernel, as decoding does
# (``quant.PREFILL_ROWS``: longer ones take the prefill path).
DECODE_CHUNK = 16


@torch.inference_mode()
def _logprobs(loaded, tokens: list[int], chunk: int | None = None) -> torch.Tensor:
    """(T, V) float32 next-token log-probabilities at every position of ``tokens``: one
    forward pass, or passes of ``chunk`` tokens over a growing cache."""
    from transformers import DynamicCache

    if chunk is None:
        ids = torch.tensor([tokens], device=loaded.device)
        return loaded.model(input_ids=ids).logits[0].float().log_softmax(-1)
    kw = (
        "cache"
        if "cache" in inspect.signature(loaded.model.forward).parameters
        else "past_key_values"
    )
    cache, out = DynamicCache(), []
    for start in range(0, len(tokens), chunk):
        ids = torch.tensor([tokens[start : start + chunk]], device=loaded.device)
        logits = loaded.model(input_ids=ids, use_cache=True, **{kw: cache}).logits[0]
        out.append(logits.float().log_softmax(-1))
    return torch.cat(out)
