"""The single-token decode step, written out for Llama-family models, and its CUDA graph.

A decode step feeds one token per row after the working cache's ``length`` columns and
returns the next logits. ``DecodeStep`` runs it without transformers' generic model
stack, over (B, E) rows, with as few operator calls per layer as give the same numbers
(at one row on a CPU each call costs about what a small kernel does; SmolLM2-135M int4
went from about 7,200 aten calls a step to 4,500):

- RMSNorm as one ``torch.rms_norm`` (float32: bit-equal to transformers' norm; other
  dtypes round the normalised rows before the weight, as transformers does); a norm of
  another form (checked on random rows at construction) keeps its own forward.
- q and k rotated at once, as ``x * cos + roll(x, D/2) * signed_sin``: bit-equal to the
  model's ``apply_rotary_pos_emb`` (checked at construction, else that function runs).
  A power-of-two score scale (1/8 for head_dim 64) is folded into q's rows of the
  rotation, exactly. The rotary embedding runs once per step (16 us; a per-position
  table would save less than that).
- q/k and gate/up of quantized layers as one product each (``engine.kernels.fused``: the
  model's layers become views of the fused weights); a quantized product's bfloat16
  output is left for float32 arithmetic to promote, which equals casting it first.
- the new keys and values written into the working buffer in place (``index_copy_`` at
  a column held in a tensor), and grouped-query attention read from it as two batched
  products over per-step views (keys read transposed), as ``engine.kernels.attention`` does.

Same operations as the model's forward, so the logits equal it to float32 noise (tested
on the tiny Llama and Qwen2, float32, int8 and int4, and on the default model).

On CUDA, each batch size in ``GRAPH_BATCHES`` is captured once as a CUDA graph over
the working buffer and replayed every step: the step's inputs (token, position,
column) are copied into static tensors, and attention covers the buffer's whole
capacity with a mask computed inside the graph from the column, so one graph serves
every length until the buffer is reallocated (a new graph is captured then). The
buffer's columns past ``length`` are zeroed once per buffer tensor, so masked columns
are never uninitialised memory (0 x NaN would poison the sum).

THE CUDA GRAPH PATH HAS NOT RUN: it was written on a machine without a GPU. Its tests
(marked ``cuda``) skip without one. ``LOOMTERM_CUDA_GRAPHS=0`` turns it off.

On a CPU the step runs eagerly (no graph), over exactly ``length + 1`` columns.

``DecodeStep.block`` runs the same operations over one row's block of drafted tokens
(drafted decoding's verification: the block's tokens are the rows of each product,
explicit positions, the tree mask added to the scores), instead of transformers'
generic forward: the same logits and KV (tested), and on SmolLM2-135M (float32, one
thread, a loaded machine) a 6-token tree cost 1.45x a plain step against 1.65x
through the generic forward. Float32 oneDNN layers (``cpu_linear.OneDnnLinear``) are
called as the product their forward runs, without the module call: 0.92x the step's
time in an A/B in one process, the same logits bit for bit. Their weights are in
oneDNN's own layout (``cpu_linear``): a block of up to five rows costs about what one
row does, so a drafted block of four tokens costs about a plain step (40-42 ms each on
SmolLM2-135M, one thread, an AMD EPYC; 58-60 ms for the block before).
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING

import torch

from loomterm.engine.kernels import layer_calls
from loomterm.engine.kernels.step_graph import StepGraph

if TYPE_CHECKING:
    from loomterm.engine.kv.cache import WorkingCache

SUPPORTED = ("llama", "mistral", "qwen2")
GRAPH_BATCHES = (1, 2, 4, 8)
_GRAPHS_KEPT = 8  # graphs kept per step object (each holds its own intermediates)


def unsupported(model) -> str | None:
    """Why ``DecodeStep`` cannot run ``model`` (None when it can)."""
    config = model.config.get_text_config(decoder=True)
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED:
        return f"{kind} models take the generic forward"
    if getattr(config, "hidden_act", "silu") != "silu":
        return "only SiLU-gated MLPs"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        window = config.sliding_window
        if window < getattr(config, "max_position_embeddings", window):
            return "sliding-window attention takes the generic forward"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "tensor-parallel-split projections take the generic forward"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) in ("dynamic",):
        return "dynamic NTK RoPE changes with the length: generic forward"
    base = getattr(model, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if base is None or not all(hasattr(base, name) for name in needed):
        return "an unfamiliar module layout"
    if not hasattr(model, "lm_head"):
        return "no lm_head"
    layer = base.layers[0]
    parts = ("q_proj", "k_proj", "v_proj", "o_proj")
    if not all(hasattr(layer.self_attn, p) for p in parts) or not hasattr(layer, "mlp"):
        return "an unfamiliar layer layout"
    if any(hasattr(layer.self_attn, name) for name in ("q_norm", "k_norm", "sinks")):
        return "query/key norms or attention sinks take the generic forward"
    module = sys.modules.get(type(layer.self_attn).__module__)
    if module is None or not hasattr(module, "apply_rotary_pos_emb"):
        return "no apply_rotary_pos_emb beside the attention module"
    return None


class DecodeStep:
    """One decode step of ``model`` over ``work`` (see the module docstring)."""

    def __init__(self, model, work: WorkingCache) -> None:
        self.model = model
        self.work = work
        base = model.model
        attn = base.layers[0].self_attn
        config = model.config.get_text_config(decoder=True)
        self.q_heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.q_heads
        self.head_dim = getattr(attn, "head_dim", None) or config.hidden_size // self.q_heads
        self.scale = float(getattr(attn, "scaling", self.head_dim**-0.5))
        self.rotate = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.device = next(model.parameters()).device
        self.graphs_on = self.device.type == "cuda" and os.environ.get(
            "LOOMTERM_CUDA_GRAPHS", "1"
        ) not in ("0", "off", "false")
        self._graphs: dict[tuple, StepGraph] = {}
        self._pool = None
        dtype = base.embed_tokens.weight.dtype
        self.final_norm = layer_calls.rms_norm(base.norm, dtype)
        self.head = layer_calls.product(model.lm_head)
        heads = (self.q_heads, self.kv_heads, self.head_dim)
        self.plan = tuple(layer_calls.layer_plan(layer, dtype, *heads) for layer in base.layers)
        self.rope_fast = layer_calls.rotation_matches(
            self.rotate, self.head_dim, self.device, dtype
        )
        # A power-of-two scale multiplies exactly wherever it is applied: then q's rows
        # of the rotation carry it (one product per step, not one per layer).
        self.head_scale = None
        if self.rope_fast and math.frexp(self.scale)[0] == 0.5:
            column = [self.scale] * self.q_heads + [1.0] * self.kv_heads
            self.head_scale = torch.tensor(column, device=self.device).view(-1, 1).to(dtype)

    @torch.inference_mode()
    def __call__(self, fed: torch.Tensor) -> torch.Tensor:
        """Feed ``fed`` (B,) at column ``work.length`` of every row; the new KV is
        written there (``work.pending`` = 1, the caller commits). Returns (B, 1, V)."""
        batch = fed.shape[0]
        work = self.work
        work.prepare(1, batch)
        length = work.length
        if self.graphs_on and batch in GRAPH_BATCHES:
            logits = self._graph(batch).replay(fed, length)
        else:
            ids = fed.view(batch, 1)
            positions = torch.full((batch, 1), length, dtype=torch.long, device=self.device)
            column = torch.tensor([length], dtype=torch.long, device=self.device)
            logits = self.run(ids, positions, column, length + 1, None)
        work.pending = 1
        return logits

    @torch.inference_mode()
    def block(
        self, ids: list[int], offsets: list[int], mask: torch.Tensor | None, keep: int
    ) -> torch.Tensor:
        """Feed a block of tokens after row 0's columns in one pass, as a drafted
        verification does (``decode.drafted``): ``ids`` at positions ``length +
        offsets``, each seeing every column before the block and the block's tokens
        ``mask`` (q, q) allows (None: causal order). Their KV is written at columns
        ``length..length + q`` (``work.pending`` = q, the caller commits). Returns the
        logits of the last ``keep``: (keep, V). The same operations as ``run``, the
        block's tokens as the rows of each product (batch 1 only)."""
        work = self.work
        q = len(ids)
        work.prepare(q, 1)
        length = work.length
        device = self.device
        ids_t = torch.tensor([ids], dtype=torch.long, device=device)  # (1, q)
        positions = torch.tensor([offsets], dtype=torch.long, device=device) + length
        if mask is None:
            mask = torch.ones(q, q, dtype=torch.bool).tril_()
        allowed = torch.ones(q, length + q, dtype=torch.bool)
        allowed[:, length:] = mask
        neg = torch.zeros(q, length + q).masked_fill_(~allowed, float("-inf")).to(device)
        logits = self.run_block(ids_t, positions, length, neg, keep)
        work.pending = q
        return logits

    def run_block(
        self, ids: torch.Tensor, positions: torch.Tensor, length: int, neg: torch.Tensor, keep: int
    ) -> torch.Tensor:
        """``block``'s operations. ids, positions: (1, q); ``neg`` (q, length + q): 0
        where a token may attend, -inf elsewhere. Returns (keep, V)."""
        base = self.model.model
        q = ids.shape[1]
        hq, hk, d = self.q_heads, self.kv_heads, self.head_dim
        groups = hq // hk
        limit = length + q
        buf = self.work.buf[:, :, :1, :, :limit]  # (L, 2, 1, Hk, T, D)
        kv = buf.view(buf.shape[0], 2, hk, limit, d)
        keys_t, values = kv[:, 0].transpose(-1, -2).unbind(0), kv[:, 1].unbind(0)
        columns = torch.arange(length, limit, device=self.device)
        h = base.embed_tokens(ids).view(q, -1)  # (q, E): the block's tokens as rows
        cos, sin = base.rotary_emb(h, positions)  # (1, q, D)
        cos, sin, signed = self._rotation(cos.view(q, 1, d), sin.view(q, 1, d))
        neg = neg.view(1, q, 1, limit)
        for (norm_in, qkv, o_proj, norm_post, mlp), keys, vals in zip(
            self.plan, keys_t, values, strict=True
        ):
            qk, v = qkv(norm_in(h))  # (q, Hq + Hk, D), (q, Hk, D)
            qh, k = self._rotate(qk, cos, sin, signed).split((hq, hk), 1)
            # (Hk, q G, D): query head h reads kv head h // G
            qh = qh.reshape(q, hk, groups, d).transpose(0, 1).reshape(hk, q * groups, d)
            k = k.permute(1, 2, 0)  # (Hk, D, q)
            keys.index_copy_(2, columns, k if k.dtype == keys.dtype else k.to(keys.dtype))
            v = v.transpose(0, 1)  # (Hk, q, D)
            vals.index_copy_(1, columns, v if v.dtype == vals.dtype else v.to(vals.dtype))
            scores = torch.bmm(qh, keys)  # (Hk, q G, T)
            if scores.dtype != torch.float32:
                scores = scores.float()
            if self.head_scale is None:
                scores = scores.mul_(self.scale)
            scores = scores.view(hk, q, groups, limit) + neg
            probs = scores.softmax(-1).view(hk, q * groups, limit)
            if probs.dtype != vals.dtype:
                probs = probs.to(vals.dtype)
            out = torch.bmm(probs, vals).view(hk, q, groups, d).transpose(0, 1)
            out = out.reshape(q, hq * d)  # (q, Hq D)
            h = h + o_proj(out if out.dtype == h.dtype else out.to(h.dtype))
            h = h + mlp(norm_post(h))
        return self._logits(h[q - keep :])  # (keep, V)

    def run(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        column: torch.Tensor,
        limit: int,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """The step's operations. ids, positions: (B, 1); column: (1,), where the new
        KV goes; attention reads columns ``[0, limit)``, with ``mask`` (T,) added to
        the scores when given. Returns (B, 1, V)."""
        base = self.model.model
        batch = ids.shape[0]
        hq, hk, d = self.q_heads, self.kv_heads, self.head_dim
        groups = hq // hk
        # Every layer's keys (transposed) and values over [0, limit), as views of the
        # working buffer: (B * Hk, D, T) and (B * Hk, T, D); the new column is
        # written into them in place.
        buf = self.work.buf[:, :, :batch, :, :limit]  # (L, 2, B, Hk, T, D)
        kv = buf.view(buf.shape[0], 2, batch * hk, limit, d)
        keys_t, values = kv[:, 0].transpose(-1, -2).unbind(0), kv[:, 1].unbind(0)
        # The embedding module itself, on (B, 1) ids: its forward hooks see the step
        # as they see a forward (tests count the tokens the model processes so).
        h = base.embed_tokens(ids).view(batch, -1)  # (B, E)
        cos, sin, signed = self._rotation(*base.rotary_emb(h, positions))  # (B, 1, D)
        column = column.view(1)
        for (norm_in, qkv, o_proj, norm_post, mlp), keys, vals in zip(
            self.plan, keys_t, values, strict=True
        ):
            qk, v = qkv(norm_in(h))  # (B, Hq + Hk, D), (B, Hk, D); maybe a kernel's dtype
            q, k = self._rotate(qk, cos, sin, signed).split((hq, hk), 1)
            q = q.reshape(batch * hk, groups, d)  # query head h = kv head h // G
            k = k.reshape(batch * hk, d, 1)  # (the same memory order as (B Hk, 1, D))
            keys.index_copy_(2, column, k if k.dtype == keys.dtype else k.to(keys.dtype))
            v = v.reshape(batch * hk, 1, d)
            vals.index_copy_(1, column, v if v.dtype == vals.dtype else v.to(vals.dtype))
            scores = torch.bmm(q, keys)  # (B * Hk, G, T)
            if scores.dtype != torch.float32:
                scores = scores.float()
            if self.head_scale is None:
                scores = scores.mul_(self.scale)
            if mask is not None:
                scores = scores + mask
            probs = scores.softmax(-1)
            if probs.dtype != vals.dtype:
                probs = probs.to(vals.dtype)
            out = torch.bmm(probs, vals).view(batch, hq * d)  # (B, Hq D)
            h = h + o_proj(out if out.dtype == h.dtype else out.to(h.dtype))  # promotes
            h = h + mlp(norm_post(h))
        logits = self._logits(h)  # (B, V)
        return logits.view(batch, 1, logits.shape[-1])

    # -- what the block and the step share --------------------------------------------
    def _rotation(self, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(cos, sin, signed sin) for the rows' positions, (R, 1, D) each: the signs
        are rotate_half's, and a power-of-two score scale is folded into q's rows of
        cos and signed sin (then (R, Hq + Hk, D))."""
        half = self.head_dim // 2
        signed = torch.cat((-sin[..., :half], sin[..., half:]), -1)
        if self.head_scale is not None:
            cos, signed = cos * self.head_scale, signed * self.head_scale
        return cos, sin, signed

    def _rotate(
        self, qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, signed: torch.Tensor
    ) -> torch.Tensor:
        """q and k (R, Hq + Hk, D) rotated to their positions, in ``cos``'s dtype."""
        if qk.dtype != cos.dtype:
            qk = qk.to(cos.dtype)
        if self.rope_fast:  # == apply_rotary_pos_emb (checked at construction)
            return qk * cos + qk.roll(self.head_dim // 2, -1) * signed
        hq, hk, d = self.q_heads, self.kv_heads, self.head_dim
        q, k = self.rotate(qk[:, :hq, None], qk[:, hq:, None], cos, sin)
        return torch.cat((q, k), 1).view(qk.shape[0], hq + hk, d)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """The next-token logits of the rows ``h`` (R, E), in ``h``'s dtype: (R, V)."""
        logits = self.head(self.final_norm(h))
        return logits if logits.dtype == h.dtype else logits.to(h.dtype)

    # -- CUDA graphs ------------------------------------------------------------------
    def _graph(self, batch: int) -> StepGraph:
        buf = self.work.buf
        key = (batch, buf.data_ptr(), tuple(buf.shape))
        graph = self._graphs.get(key)
        if graph is None:
            if len(self._graphs) >= _GRAPHS_KEPT:
                self._graphs.pop(next(iter(self._graphs)))
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = self._graphs[key] = StepGraph(self, batch, self._pool)
        return graph


def make_decode_step(model, work: WorkingCache) -> DecodeStep | None:
    """A ``DecodeStep`` for ``model``, or None when it does not support the model."""
    if unsupported(model) is not None:
        return None
    return DecodeStep(model, work)
