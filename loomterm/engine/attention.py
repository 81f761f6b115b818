"""Attention over the working cache's strided views, fast for decoding.

The working cache hands attention ``(B, H, T, D)`` views into a larger preallocated
buffer, so the keys are not contiguous. PyTorch's SDPA kernels copy such inputs, or
fall back to a slow path, on every layer and every step: on a CPU, one query over
1,000 keys took ~10 ms per layer instead of ~0.3 ms. For short queries (decoding, a
verified draft, the last token after a truncate) this module does the attention as two
batched matmuls that read the strided keys in place, with grouped-query heads packed
so the KV heads are never repeated. Long queries (prefill) go to transformers' SDPA
path, where copying the keys once per layer is negligible next to the work.

It is registered with transformers' ``AttentionInterface`` under ``"loom"`` and uses
SDPA's mask construction, so causal, padding and custom 4D masks all arrive as they
would for ``"sdpa"``.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "loom"
# Queries longer than this go to SDPA (prefill).
SHORT_QUERY = 32
# Extra per-model attention features this module does not implement: delegate.
_UNSUPPORTED = ("softcap", "sliding_window", "s_aux", "sinks", "position_bias")


def loom_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """query: (B, Hq, q, D); key, value: (B, Hkv, T, D). Returns ((B, q, Hq, D), None)."""
    batch, q_heads, q_len, head_dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    if (
        q_len > SHORT_QUERY
        or dropout
        or any(kwargs.get(name) is not None for name in _UNSUPPORTED)
        or value.shape[-1] != head_dim
    ):
        return sdpa_attention_forward(
            module,
            query,
            key.contiguous(),
            value.contiguous(),
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    groups = q_heads // kv_heads
    scale = scaling if scaling is not None else head_dim**-0.5
    # Query head h uses KV head h // groups: pack each group's queries together.
    packed = query.reshape(batch, kv_heads, groups * q_len, head_dim)  # (B, Hkv, G*q, D)
    scores = torch.matmul(packed, key.transpose(-1, -2)).float() * scale  # (B, Hkv, G*q, T)
    scores = scores.view(batch, kv_heads, groups, q_len, kv_len)  # (B, Hkv, G, q, T)
    if attention_mask is not None:
        mask = attention_mask[:, :, None]  # (B|1, 1, 1, q, T)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    elif q_len > 1:
        # No mask given means plain causal: query i sits at column T - q + i.
        rows = torch.arange(q_len, device=query.device)[:, None] + (kv_len - q_len)
        cols = torch.arange(kv_len, device=query.device)[None, :]
        scores = scores.masked_fill(cols > rows, float("-inf"))  # (B, Hkv, G, q, T)
    probs = scores.softmax(-1).to(value.dtype).view(batch, kv_heads, groups * q_len, kv_len)
    out = torch.matmul(probs, value)  # (B, Hkv, G*q, D)
    out = out.view(batch, q_heads, q_len, head_dim).transpose(1, 2)  # (B, q, Hq, D)
    return out.contiguous(), None


def install(model) -> str | None:
    """Switch ``model`` to this attention when it currently uses SDPA or eager attention.

    Returns None when it did, else one line saying why not (the model then keeps its
    own attention, which copies the working cache's views: slower decoding, same
    numbers). The caller reports that line once."""
    AttentionInterface.register(NAME, loom_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    config = model.config
    current = getattr(config, "_attn_implementation", None)
    if current == NAME:
        return None  # another loom on the same model installed it already
    if current not in ("sdpa", "eager", None):
        return f"the model uses {current} attention; loomterm's in-place attention is off"
    try:
        model.set_attn_implementation(NAME)
    except Exception as exc:  # noqa: BLE001 - any refusal means: keep the model's own
        return f"{type(model).__name__} refused loomterm's attention ({exc}); using its own"
    if getattr(model.config, "_attn_implementation", None) != NAME:
        return (
            f"{type(model).__name__} kept its own attention; loomterm's in-place attention is off"
        )
    return None
