"""What every bench section shares: fresh looms, stock attention, full recomputes."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

from loomterm.engine import Loom

if TYPE_CHECKING:
    from loomterm.engine.models import LoadedModel


def make_loom(loaded: LoadedModel, drafting: str = "off", n_ctx: int | None = None) -> Loom:
    """A fresh, empty loom on an already loaded model."""
    loom = Loom.from_loaded(loaded, n_ctx=n_ctx)
    loom.update_settings(drafting=drafting)
    return loom


@contextlib.contextmanager
def stock_attention(model):
    """Run ``model`` with transformers' own SDPA attention, as a plain transformers user
    would, then restore whatever loomterm installed."""
    current = getattr(model.config, "_attn_implementation", None)
    changed = False
    if current not in (None, "sdpa"):
        try:
            model.set_attn_implementation("sdpa")
            changed = True
        except Exception:  # a model without SDPA keeps what it has
            changed = False
    try:
        yield
    finally:
        if changed:
            model.set_attn_implementation(current)


@torch.inference_mode()
def full_recompute(loaded: LoadedModel, tokens: list[int]) -> torch.Tensor:
    """Next-token logits of ``tokens`` from scratch: one forward pass, no cache. (V,)"""
    ids = torch.tensor([tokens], device=loaded.device)  # (1, T)
    with stock_attention(loaded.model):
        return loaded.model(input_ids=ids, logits_to_keep=1).logits[0, -1]
