"""Prefill attention on a CPU: a chunk after earlier columns runs as two flash calls
merged by log-sum-exp (``attention.split_causal``); it must equal masked SDPA, and a
long chunked prefill must equal a full recompute."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from loomterm.engine.kernels import attention
from loomterm.engine.kernels.attention import SHORT_QUERY, causal_mask, split_causal
from loomterm.engine.local.path_cache import PREFILL_CHUNK
from tests.helpers import assert_matches_recompute, make_loom


def masked_reference(query, key, value, groups):
    """Plain SDPA over repeated KV heads with the lower-right causal mask."""
    q_len, kv_len = query.shape[2], key.shape[2]
    mask = torch.ones(q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)  # (q, T)
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask[None, None])
    return out.transpose(1, 2)  # (B, q, Hq, D)


@pytest.mark.parametrize("past", [0, 1, 77, 300])
@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 3])
def test_split_causal_equals_masked_sdpa(past, groups, dtype, batch):
    torch.manual_seed(past + groups)
    q_len, kv_heads, dim = 40, 2, 16
    buf = torch.randn(2, batch, kv_heads, past + q_len + 9, dim, dtype=dtype)  # spare columns
    key, value = buf[0, :, :, : past + q_len], buf[1, :, :, : past + q_len]  # strided views
    query = torch.randn(batch, q_len, kv_heads * groups, dim, dtype=dtype).transpose(1, 2)
    got = split_causal(query, key, value, None).float()
    want = masked_reference(query.float(), key.float(), value.float(), groups)
    tol = 1e-5 if dtype == torch.float32 else 3e-2  # bfloat16 keeps 8 bits of mantissa
    assert got.shape == want.shape
    assert (got - want).abs().max() < tol


def test_causal_mask_is_left_out_only_for_a_long_plain_chunk_on_the_cpu():
    long = SHORT_QUERY + 1
    assert causal_mask(1, long, 100 + long, q_offset=100) is None
    # Short queries, or a chunk not at the cache's end: a real mask.
    short = causal_mask(1, 4, 104, q_offset=100)
    assert short is not None and short.shape == (1, 1, 4, 104)
    offset = causal_mask(1, long, 200, q_offset=100)
    assert offset is not None and offset.shape == (1, 1, long, 200)


def test_a_chunked_prefill_equals_a_recompute(tiny_llama_dir, monkeypatch):
    loom = make_loom(tiny_llama_dir)
    tokens = [(i * 37 + 5) % 200 + 3 for i in range(2 * PREFILL_CHUNK + 45)]
    pasts = []  # columns before each chunk that ran the split (one entry per layer)

    def counted(query, key, value, scaling):
        pasts.append(key.shape[2] - query.shape[2])
        return split_causal(query, key, value, scaling)

    monkeypatch.setattr(attention, "split_causal", counted)
    node = loom.append_tokens(loom.root, tokens)
    monkeypatch.undo()
    layers = loom.runner.kv_geometry()[0]
    assert sorted(set(pasts)) == [0, PREFILL_CHUNK, 2 * PREFILL_CHUNK]
    assert len(pasts) == 3 * layers
    assert_matches_recompute(loom, node)
    # Records of typed tokens too: each one's log-probability equals the recompute's.
    config = loom.runner.model.config
    saved, config._attn_implementation = config._attn_implementation, "sdpa"  # stock SDPA
    try:
        with torch.inference_mode():
            ids = torch.tensor([tokens])
            logits = loom.runner.model(input_ids=ids).logits[0].float().log_softmax(-1)  # (T, V)
    finally:
        config._attn_implementation = saved
    for i in (1, PREFILL_CHUNK - 1, PREFILL_CHUNK, PREFILL_CHUNK + 1, len(tokens) - 1):
        want = float(logits[i - 1, tokens[i]])
        assert node.logprobs[i] == pytest.approx(want, abs=1e-4)
        assert node.top[i][0][0] == int(logits[i - 1].argmax())
