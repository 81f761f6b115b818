"""The single-token decode step, written out for Llama-family models, and its CUDA graph.

A decode step feeds one token per row after the working cache's ``length`` columns and
returns the next logits. ``DecodeStep`` runs it without transformers' generic model
stack: the model's own modules (embedding, RMSNorm, projections, MLP, rotary
embedding, ``apply_rotary_pos_emb`` from the model's own file), with the new keys and
values written into the working buffer in place (``index_copy_`` at a column held in
a tensor) and grouped-query attention read from the buffer as two matrix products, as
``engine.attention`` does. Same operations, same order: the logits equal the model's
forward to float32 noise (tested on the tiny Llama and Qwen2).

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
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from loomterm.engine.kvcache import WorkingCache

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
        self._graphs: dict[tuple, _Graph] = {}
        self._pool = None

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
        model, base = self.model, self.model.model
        batch = ids.shape[0]
        hq, hk, d = self.q_heads, self.kv_heads, self.head_dim
        groups = hq // hk
        buf = self.work.buf  # (L, 2, B', H, T, D)
        h = base.embed_tokens(ids)  # (B, 1, E)
        cos, sin = base.rotary_emb(h, positions)  # (B, 1, D)
        for i, layer in enumerate(base.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(batch, 1, hq, d).transpose(1, 2)  # (B, Hq, 1, D)
            k = attn.k_proj(x).view(batch, 1, hk, d).transpose(1, 2)  # (B, Hk, 1, D)
            v = attn.v_proj(x).view(batch, 1, hk, d).transpose(1, 2)
            q, k = self.rotate(q, k, cos, sin)
            keys, values = buf[i, 0, :batch], buf[i, 1, :batch]  # (B, Hk, T, D)
            keys.index_copy_(2, column, k.to(keys.dtype))
            values.index_copy_(2, column, v.to(values.dtype))
            keys, values = keys[:, :, :limit], values[:, :, :limit]
            packed = q.reshape(batch, hk, groups, d)  # query head h = kv head h // G
            scores = torch.matmul(packed, keys.transpose(-1, -2)).float() * self.scale
            if mask is not None:
                scores = scores + mask
            probs = scores.softmax(-1).to(values.dtype)  # (B, Hk, G, T)
            out = torch.matmul(probs, values).reshape(batch, 1, hq * d)
            h = h + attn.o_proj(out.to(h.dtype))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return model.lm_head(base.norm(h))  # (B, 1, V)

    # -- CUDA graphs ------------------------------------------------------------------
    def _graph(self, batch: int) -> _Graph:
        buf = self.work.buf
        key = (batch, buf.data_ptr(), tuple(buf.shape))
        graph = self._graphs.get(key)
        if graph is None:
            if len(self._graphs) >= _GRAPHS_KEPT:
                self._graphs.pop(next(iter(self._graphs)))
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = self._graphs[key] = _Graph(self, batch, self._pool)
        return graph


class _Graph:
    """One captured step for ``batch`` rows over the current buffer."""

    def __init__(self, step: DecodeStep, batch: int, pool) -> None:
        self.step = step
        device = step.device
        work = step.work
        capacity = work.capacity
        self.batch = batch
        self.buffer: weakref.ref | None = None  # the buffer tensor whose tail was zeroed
        self.ids = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.positions = torch.full((batch, 1), work.length, dtype=torch.long, device=device)
        self.column = torch.tensor([work.length], dtype=torch.long, device=device)
        self.columns = torch.arange(capacity, device=device)
        self.capacity = capacity
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool
        self.logits: torch.Tensor | None = None
        self.captured = False

    def _body(self) -> torch.Tensor:
        neg = torch.finfo(torch.float32).min
        mask = torch.where(self.columns > self.column, neg, 0.0).float()  # (T,)
        return self.step.run(self.ids, self.positions, self.column, self.capacity, mask)

    def _load(self, fed: torch.Tensor, length: int) -> None:
        self.ids.copy_(fed.view(-1, 1))
        self.positions.fill_(length)
        self.column.fill_(length)

    def _clear_tail(self, length: int) -> None:
        """Masked columns must hold numbers, not whatever memory a new buffer got: zero
        them once per buffer tensor (a reallocated buffer can come back at the same
        address and shape, and so to this graph)."""
        buf = self.step.work.buf
        if self.buffer is None or self.buffer() is not buf:
            buf[:, :, : self.batch, :, length:].zero_()
            self.buffer = weakref.ref(buf)

    def replay(self, fed: torch.Tensor, length: int) -> torch.Tensor:
        self._clear_tail(length)
        self._load(fed, length)
        if not self.captured:
            # Warm up on a side stream (as torch.cuda.graphs requires), then capture;
            # each run writes this step's KV at ``length``, the same values each time.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._body()
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(self.graph, pool=self.pool):
                self.logits = self._body()
            self.captured = True
        self.graph.replay()
        return self.logits.clone()  # the static output is overwritten by the next replay


def make_decode_step(model, work: WorkingCache) -> DecodeStep | None:
    """A ``DecodeStep`` for ``model``, or None when it does not support the model."""
    if unsupported(model) is not None:
        return None
    return DecodeStep(model, work)
