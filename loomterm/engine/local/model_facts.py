"""What the local runner reads off a loaded model before it runs it: the vocabulary and
positions, the end-of-text ids, how its forward names the cache, how the status bar
names its precision, and the capabilities its configuration allows.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from loomterm.engine.kv.rope import RopeSpec
from loomterm.engine.runner import Capabilities


def vocab_size(model) -> int:
    """Rows of the output layer: the logits' width."""
    output = model.get_output_embeddings()
    return int(getattr(output, "out_features", 0) or output.weight.shape[0])


def max_positions(config) -> int:
    """The positions the model was trained for (4096 when the configuration says none)."""
    return int(
        getattr(config, "max_position_embeddings", None)
        or getattr(config, "n_positions", None)
        or 4096
    )


def eos_ids(model, tokenizer) -> set[int]:
    """Every end-of-text id the generation config, the model config or the tokenizer names."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids


def cache_keyword(model) -> str:
    """The keyword the model's forward takes its KV cache by."""
    if "cache" in inspect.signature(model.forward).parameters:
        return "cache"
    return "past_key_values"


def precision_note(loaded) -> tuple[str, bool, str]:
    """(precision, quantized, note): the precision (``float32``, ``int8 (float32)``...),
    whether the weights are quantized, and what joins the device on the status bar
    (`` · int8 (float32)``; empty where the precision is the device's usual)."""
    precision = getattr(loaded, "precision", str(loaded.dtype).removeprefix("torch."))
    usual = (torch.float32,) if loaded.device.type != "cuda" else (torch.bfloat16, torch.float16)
    quantized = getattr(loaded, "quant", "none") != "none"
    plain = not quantized and loaded.dtype in usual
    return precision, quantized, "" if plain else f" · {precision}"


def capabilities(config, rope: RopeSpec | None, attention_note: str | None) -> Capabilities:
    """What the local runner can do for a model of ``config``, and why not where not."""
    why_not = () if rope else (("rerope", no_rope_reason(config)),)
    no_drafts = no_drafting_reason(config, attention_note)
    if no_drafts:
        why_not += (("drafting", no_drafts),)
    return Capabilities(
        rerope=rope is not None,
        full_logits=True,
        node_kv=True,
        batched_siblings=True,
        drafting=no_drafts is None,
        prompt_logprobs=True,
        healing=True,
        why_not=why_not,
    )


def no_drafting_reason(config, attention_note: str | None) -> str | None:
    """Why drafted decoding is off for this model (None: it is on). Its tree of guesses
    is verified under a custom (B, 1, q, T) mask, which only loomterm's attention reads
    as meant (a model's own eager attention adds it as a bias, Bloom builds ALiBi from a
    2D mask). Past a sliding window it is off per generation (``draft_limit``)."""
    if attention_note is not None:
        return "drafted decoding's tree masks need loomterm's attention"
    if getattr(config, "alibi", False):  # Falcon builds its ALiBi bias from a 2D mask
        return "drafted decoding's tree masks do not carry ALiBi position biases"
    return None


def draft_limit(config) -> int | None:
    """The columns drafted decoding may reach on this model: its smallest sliding
    window or attention chunk (None: no limit). A tree mask replaces the window's mask,
    which changes nothing only while every column lies inside one window."""
    windows = [getattr(config, "attention_chunk_size", None)]
    if getattr(config, "use_sliding_window", True):
        windows.append(getattr(config, "sliding_window", None))
    windows = [int(w) for w in windows if isinstance(w, int) and w > 0]
    return min(windows) if windows else None


def no_rope_reason(config: Any) -> str:
    """Why splices on this model recompute instead of re-rotating."""
    scaling = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    scaling = scaling or {}
    kind = scaling.get("rope_type") or scaling.get("type") if isinstance(scaling, dict) else None
    if kind and kind != "default":
        return f"{kind} RoPE scaling is not shift-invariant: splices recompute exactly"
    return "this model has no rotary positions (or failed the shift check): splices are exact"
