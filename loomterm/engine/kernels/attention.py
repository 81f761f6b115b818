"""Attention over the working cache's strided views, fast for decoding.

The working cache hands attention ``(B, H, T, D)`` views into a larger preallocated
buffer, so the keys are not contiguous. PyTorch's SDPA kernels copy such inputs, or
fall back to a slow path, on every layer and every step: on a CPU, one query over
1,000 keys took ~10 ms per layer instead of ~0.3 ms. For short queries (decoding, a
verified draft, the last token after a truncate) this module does the attention as two
batched matmuls that read the strided keys in place, with grouped-query heads packed
so the KV heads are never repeated. Long queries (prefill) go to transformers' SDPA
path, where copying the keys once per layer is negligible next to the work -- except
on a CPU, where a prefill chunk after earlier columns (causal, aligned to the cache's
end) is split in two flash-attention calls instead: the chunk against the columns
before it (no mask at all, the grouped-query heads packed as above) and the chunk
against itself (``is_causal``), merged through their log-sum-exps. SDPA with the
materialised (q, T) mask reads the mask for every head and repeats the KV heads
first; the split reads the strided keys in place and was 20-25% faster at 8,000
tokens (``bench.prefill``). ``causal_mask`` hands such chunks no mask (None).

It is registered with transformers' ``AttentionInterface`` under ``"loom"`` and uses
SDPA's mask construction, so causal, padding and custom 4D masks all arrive as they
would for ``"sdpa"``.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask

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
    if q_len > SHORT_QUERY and _split_applies(module, query, attention_mask, is_causal, dropout):
        if not any(kwargs.get(name) is not None for name in _UNSUPPORTED):
            return split_causal(query, key, value, scaling), None
    if (
        q_len > SHORT_QUERY
        or dropout
        or any(kwargs.get(name) is not None for name in _UNSUPPORTED)
        or value.shape[-1] != head_dim
        or (attention_mask is not None and attention_mask.shape[1] != 1)  # per-head bias
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


def _split_applies(module, query, attention_mask, is_causal, dropout) -> bool:
    """Whether a long query is the plain causal chunk ``causal_mask`` left unmasked."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    return attention_mask is None and causal and not dropout and query.device.type == "cpu"


def split_causal(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None
) -> torch.Tensor:
    """Causal attention of the last ``q`` columns over all ``T``, lower-right aligned,
    as two flash-attention calls merged by log-sum-exp (see the module docstring).
    query: (B, Hq, q, D); key, value: (B, Hkv, T, D), strided views are fine.
    Returns (B, q, Hq, D)."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    batch, q_heads, q_len, head_dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    groups = q_heads // kv_heads
    past = kv_len - q_len
    scale = scaling if scaling is not None else head_dim**-0.5
    own_k, own_v = key[:, :, past:], value[:, :, past:]  # (B, Hkv, q, D)
    if groups > 1:
        own_k = own_k.repeat_interleave(groups, dim=1)  # (B, Hq, q, D): q columns only
        own_v = own_v.repeat_interleave(groups, dim=1)
    out, lse = flash(query, own_k, own_v, 0.0, True, scale=scale)  # (B, Hq, q, D), (B, Hq, q)
    if past > 0:
        packed = query.reshape(batch, kv_heads, groups * q_len, head_dim)  # (B, Hkv, G*q, D)
        before, lse_before = flash(packed, key[:, :, :past], value[:, :, :past], scale=scale)
        before = before.reshape(batch, q_heads, q_len, head_dim)  # (B, Hq, q, D)
        lse_before = lse_before.reshape(batch, q_heads, q_len).float()  # (B, Hq, q)
        lse = lse.float()
        total = torch.logaddexp(lse, lse_before)  # (B, Hq, q)
        out = (
            out.float() * (lse - total).exp().unsqueeze(-1)
            + before.float() * (lse_before - total).exp().unsqueeze(-1)
        ).to(query.dtype)  # (B, Hq, q, D)
    return out.transpose(1, 2).contiguous()  # (B, q, Hq, D)


def causal_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function=causal_mask_function,
    attention_mask: torch.Tensor | None = None,
    local_size: int | None = None,
    allow_is_causal_skip: bool = True,
    device: torch.device | str = "cpu",
    **kwargs,
) -> torch.Tensor | None:
    """``sdpa_mask``, except that a long plain causal chunk at the cache's end on a CPU
    gets no mask: ``loom_attention`` then runs ``split_causal``."""
    if (
        allow_is_causal_skip
        and mask_function is causal_mask_function
        and attention_mask is None
        and local_size is None
        and kv_offset == 0
        and isinstance(q_offset, int)
        and q_offset + q_length == kv_length
        and q_length > SHORT_QUERY
        and torch.device(device).type == "cpu"
    ):
        return None
    return sdpa_mask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=mask_function,
        attention_mask=attention_mask,
        local_size=local_size,
        allow_is_causal_skip=allow_is_causal_skip,
        device=device,
        **kwargs,
    )


def own_attention_reason(model) -> str | None:
    """Why ``model`` must run its own attention rather than this module's, or None.

    This module does short queries itself and hands the rest to transformers' SDPA
    path, with per-call features (sliding windows, position biases, per-head masks)
    left to SDPA too. So it can run a model only where SDPA can: a model class that
    refuses SDPA (Gemma 2, gpt-oss's attention sinks) or a config asking for what SDPA
    does not do (attention logit soft-capping) keeps transformers' attention, as
    transformers itself would run it."""
    config = model.config.get_text_config(decoder=True)
    features = []
    if getattr(config, "attn_logit_softcapping", None):
        features.append("attention logit soft-capping")
    if any(isinstance(getattr(m, "sinks", None), torch.Tensor) for m in model.modules()):
        features.append("attention sinks")
    if features:
        return ", ".join(features)
    if not getattr(type(model), "_supports_sdpa", False):
        return f"{type(model).__name__} has no SDPA path"
    return None


def install(model) -> str | None:
    """Switch ``model`` to this attention when it currently uses SDPA or eager attention
    and ``own_attention_reason`` finds nothing against it.

    Returns None when it did, else one line naming the attention the model keeps and
    why (its own attention copies the working cache's views: slower decoding, the same
    numbers). The caller reports that line once."""
    AttentionInterface.register(NAME, loom_attention)
    AttentionMaskInterface.register(NAME, causal_mask)
    config = model.config
    current = getattr(config, "_attn_implementation", None)
    if current == NAME:
        return None  # another loom on the same model installed it already
    reason = own_attention_reason(model)
    if reason is not None:
        if current == "sdpa" and "soft-capping" in reason:
            model.set_attn_implementation("eager")  # SDPA would raise on the cap
            current = "eager"
        return f"attention: {current}, the model's own (loomterm's cannot run it: {reason})"
    if current not in ("sdpa", "eager", None):
        return f"attention: {current}, the model's own (loomterm's in-place attention is off)"
    try:
        model.set_attn_implementation(NAME)
    except Exception as exc:  # noqa: BLE001 - any refusal means: keep the model's own
        return f"attention: {current}, the model's own ({type(model).__name__} refused loomterm's: {exc})"
    if getattr(model.config, "_attn_implementation", None) != NAME:
        return f"attention: {current}, the model's own ({type(model).__name__} kept it)"
    return None


def describe(model) -> str:
    """One line naming the attention ``model`` runs (after ``install``): loomterm's, or
    the model's own and why."""
    return install(model) or "attention: loomterm's in-place attention"
