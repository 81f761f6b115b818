"""What every bench section shares: fresh looms, stock attention, full recomputes."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from loomterm.engine import Loom
from loomterm.engine.kernels import attention

if TYPE_CHECKING:
    from loomterm.engine.models.load import LoadedModel


# The engine options of this bench run (``--n-ctx``, ``--kv-budget``), for every loom the
# sections make; set by ``runner.run_bench``.
_LOOM_OPTIONS: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "bench_loom_options", default=None
)


@contextlib.contextmanager
def loom_options(**options: Any) -> Iterator[None]:
    """Make every :func:`make_loom` inside get ``options`` (``n_ctx``, ``kv_budget``);
    a None option keeps the engine's default."""
    token = _LOOM_OPTIONS.set({k: v for k, v in options.items() if v is not None})
    try:
        yield
    finally:
        _LOOM_OPTIONS.reset(token)


def make_loom(loaded: LoadedModel, drafting: str = "off", n_ctx: int | None = None) -> Loom:
    """A fresh, empty loom on an already loaded model, with the run's engine options
    (``n_ctx`` given here wins)."""
    options = dict(_LOOM_OPTIONS.get() or {})
    if n_ctx is not None:
        options["n_ctx"] = n_ctx
    loom = Loom.from_loaded(loaded, **options)
    # Healing off: the rows compare generations with a peer's from the same tokens (the
    # corpus is cut anywhere); the healing section turns it on itself.
    loom.update_settings(drafting=drafting, token_healing="off")
    return loom


@contextlib.contextmanager
def stock_attention(model):
    """Run ``model`` with transformers' own SDPA attention, as a plain transformers user
    would, then restore whatever loomterm installed. A model that kept its own attention
    (``kernels.attention.install``: Gemma 2's eager) keeps it here too."""
    current = getattr(model.config, "_attn_implementation", None)
    changed = False
    if current == attention.NAME:
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


@contextlib.contextmanager
def fresh_transformers(loaded: LoadedModel, dtype: torch.dtype | None = None) -> Iterator[Any]:
    """The peer as its users run it: the same model loaded afresh by transformers'
    ``AutoModelForCausalLM.from_pretrained`` (its own attention, layout and kernels,
    none of loomterm's), on ``loaded``'s device, in ``dtype`` (default: ``loaded``'s).
    Freed on leaving, so that only one extra copy is ever held."""
    from transformers import AutoModelForCausalLM

    where = loaded.model.name_or_path  # the folder (or hub id) loomterm loaded it from
    model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype or loaded.dtype)
    model = model.to(loaded.device).eval()
    model.requires_grad_(False)
    try:
        yield model
    finally:
        del model
        if loaded.device.type == "cuda":
            torch.cuda.empty_cache()


@torch.inference_mode()
def full_recompute(loaded: LoadedModel, tokens: list[int]) -> torch.Tensor:
    """Next-token logits of ``tokens`` from scratch: one forward pass, no cache. (V,)"""
    ids = torch.tensor([tokens], device=loaded.device)  # (1, T)
    with stock_attention(loaded.model):
        return loaded.model(input_ids=ids, logits_to_keep=1).logits[0, -1]
