"""Test helpers: build looms on tiny models and compare against full recomputes."""

from __future__ import annotations

import torch

from loomterm.engine import Loom
from loomterm.engine.models import load_model

# float32 noise: the tolerance is about 1e-4 relative.
REL_TOL = 1e-4


def make_loom(folder, **kwargs) -> Loom:
    """A fresh loom on a model folder (the tiny fixtures), on the CPU in float32."""
    return Loom.from_loaded(load_model(str(folder), device="cpu", dtype="float32"), **kwargs)


def window_tokens(loom: Loom, tokens: list[int]) -> list[int]:
    """What the model sees for a path of ``tokens``: all of it, or the context window."""
    shift = loom._shift_for(len(tokens))
    if not shift:
        return tokens
    return tokens[: loom.n_keep] + tokens[loom.n_keep + shift :]


@torch.inference_mode()
def reference_logits(loom: Loom, tokens: list[int]) -> torch.Tensor:
    """A plain transformers forward over the tokens, no cache, with transformers' own
    SDPA attention (not loomterm's): (V,) float32."""
    ids = torch.tensor([window_tokens(loom, tokens)], device=loom.device)
    config = loom.model.config
    saved = config._attn_implementation
    config._attn_implementation = "sdpa"
    try:
        return loom.model(input_ids=ids).logits[0, -1].float()
    finally:
        config._attn_implementation = saved


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(
        (got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-9)
    )


def assert_matches_recompute(loom: Loom, node, tol: float = REL_TOL) -> float:
    """next_logits(node) equals a full recompute of its tokens; returns the error."""
    err = relative_error(loom.next_logits(node), reference_logits(loom, loom.tokens(node)))
    assert err < tol, f"next_logits differs from a recompute by {err:.2e} (relative)"
    return err


class ForwardCounter:
    """Counts the tokens and batch rows the model really processes (a forward hook on
    the input embeddings, not a mock)."""

    def __init__(self, loom: Loom) -> None:
        self.tokens = 0
        self.calls = 0
        self.batches: list[int] = []
        embed = loom.model.get_input_embeddings()
        self._handle = embed.register_forward_hook(self._hook)

    def _hook(self, module, inputs, output) -> None:
        ids = inputs[0]
        self.calls += 1
        self.tokens += ids.shape[-1]
        self.batches.append(ids.shape[0])

    def reset(self) -> None:
        self.tokens, self.calls, self.batches = 0, 0, []

    def close(self) -> None:
        self._handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
