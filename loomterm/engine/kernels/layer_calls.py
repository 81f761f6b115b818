"""The decode step's per-layer callables (``kernels.step.DecodeStep``): each of a
layer's parts as the fewest operator calls that give the model's own numbers, and the
checks that the fast forms (one ``rms_norm``, the rotation as a roll) match the model's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from loomterm.engine.kernels.cpu_linear import OneDnnLinear, onednn_product
from loomterm.engine.kernels.fused import fuse_layer
from loomterm.engine.kernels.quant import F16Linear, Int4Linear, Int8Linear


def layer_plan(layer, dtype: torch.dtype, hq: int, hk: int, d: int) -> tuple:
    """(input norm, q/k/v, o_proj, post-attention norm, MLP) of one layer, as
    callables over (B, E) rows; q/k/v and gate/up fused where they can be. ``hq``,
    ``hk``: query and KV heads; ``d``: the head dim."""
    fused = fuse_layer(layer)
    return (
        rms_norm(layer.input_layernorm, dtype),
        qkv_product(fused.attention, hq, hk, d),
        product(layer.self_attn.o_proj),
        rms_norm(layer.post_attention_layernorm, dtype),
        mlp_product(layer.mlp, fused.mlp, dtype),
    )


def product(module) -> Callable[[torch.Tensor], torch.Tensor]:
    """(B, in) -> (B, out) by ``module``. A quantized layer's output is left in its
    kernel's dtype (``Int8Linear.product``); a oneDNN float32 layer
    (``cpu_linear.OneDnnLinear``) runs the op its forward would, called directly; any
    other layer runs its own forward (a float layer's choice of kernel is its own, and
    so are its numbers).

    A oneDNN layer's weight is in oneDNN's own layout, where one or two rows are padded
    to four (``cpu_linear.onednn_product``): a step costs what one row did on
    ``F.linear``, and a drafted block of up to five tokens about the same (the table in
    ``cpu_linear``'s docstring). The values are ``F.linear``'s summed in another order
    (float32 noise, about 1e-6 relative); a row's product is the same alone or in a
    block."""
    if isinstance(module, (Int8Linear, Int4Linear, F16Linear)):
        return module.product
    if isinstance(module, OneDnnLinear):
        # The product its forward runs (the step is under inference mode, float32 in),
        # without a module call's frames (see the module docstring).
        weight, bias = module.weight, module.bias

        def onednn(x: torch.Tensor) -> torch.Tensor:
            if x.dtype != torch.float32:
                return module(x)
            return onednn_product(x, weight, bias)

        return onednn
    return module


def qkv_product(groups, hq: int, hk: int, d: int) -> Callable:
    """x (B, E) -> (q and k as (B, Hq + Hk, D), v as (B, Hk, D)): one product when q,
    k and v fused, two when q and k did (the value projection kept float)."""
    names = tuple(n for g in groups for n in g.names)
    assert names == ("q_proj", "k_proj", "v_proj"), names
    width = hq + hk
    products = [product(g.module) for g in groups]
    if len(groups) == 1:
        (both,) = products

        def qkv(x: torch.Tensor):
            heads = both(x).view(x.shape[0], width + hk, d)
            return heads[:, :width], heads[:, width:]

        return qkv
    if groups[0].names == ("q_proj", "k_proj"):
        qk_product, v_product = products

        def qk_v(x: torch.Tensor):
            rows = x.shape[0]
            return qk_product(x).view(rows, width, d), v_product(x).view(rows, hk, d)

        return qk_v

    if all(len(g.names) == 1 for g in groups):
        q_product, k_product, v_product = products

        def q_k_v(x: torch.Tensor):
            rows = x.shape[0]
            qk = torch.cat((q_product(x), k_product(x)), -1).view(rows, width, d)
            return qk, v_product(x).view(rows, hk, d)

        return q_k_v

    def parts_of(x: torch.Tensor):
        outs = []
        for group, product in zip(groups, products, strict=True):
            outs.extend(product(x).split(list(group.widths), -1))
        q, k, v = (t.reshape(x.shape[0], -1, d) for t in outs)
        return torch.cat((q, k), 1), v

    return parts_of


def mlp_product(mlp, groups, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """``down(silu(gate(x)) * up(x))`` with gate and up as one product where fused.
    silu runs in ``dtype`` (the quantized product is cast for it, as the layer's own
    forward does); up's bfloat16 promotes in the product, exactly."""
    if not groups or not hasattr(mlp, "down_proj"):
        return mlp
    down = product(mlp.down_proj)
    if len(groups) == 1:
        both_product, width = product(groups[0].module), groups[0].widths[0]

        def fused(x: torch.Tensor) -> torch.Tensor:
            both = both_product(x)  # (B, 2I)
            gate, up = both.split(width, -1)
            return down(F.silu(gate if gate.dtype == dtype else gate.to(dtype)) * up)

        return fused
    gate_product, up_product = product(mlp.gate_proj), product(mlp.up_proj)

    def separate(x: torch.Tensor) -> torch.Tensor:
        gate = gate_product(x)
        return down(F.silu(gate if gate.dtype == dtype else gate.to(dtype)) * up_product(x))

    return separate


def rms_norm(module, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module`` (a Llama-style RMSNorm) as one ``F.rms_norm`` where that gives the
    same numbers: in float32 the fused kernel rounds as transformers' norm does
    (normalise in float32, then times the weight); in another dtype the normalised
    rows are rounded to it before the weight multiplies, as transformers does. A norm
    of another form (checked on random rows) keeps its own forward."""
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", None)
    if weight is None or eps is None or weight.dim() != 1:
        return module
    shape = (weight.shape[0],)
    if dtype == torch.float32 and weight.dtype == torch.float32:

        def norm(x: torch.Tensor) -> torch.Tensor:
            return torch.rms_norm(x, shape, weight, eps)
    else:

        def norm(x: torch.Tensor) -> torch.Tensor:
            return weight * torch.rms_norm(x.float(), shape, None, eps).to(x.dtype)

    probe = torch.randn(3, shape[0], generator=torch.Generator().manual_seed(0)) * 3
    probe = probe.to(device=weight.device, dtype=dtype)
    with torch.inference_mode():
        want, got = module(probe).float(), norm(probe).float()
    tol = 4 * torch.finfo(dtype).eps * float(want.abs().max())
    return norm if bool((want - got).abs().max() <= tol) else module


def rotation_matches(rotate, head_dim: int, device, dtype: torch.dtype) -> bool:
    """Whether ``x * cos + roll(x, D/2) * signed_sin`` (what ``run`` does, on q and k
    at once) gives ``rotate``'s (the model's ``apply_rotary_pos_emb``) numbers."""
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 3, 1, head_dim, generator=g), torch.randn(2, 1, 1, head_dim, generator=g)
    angles = torch.rand(2, 1, head_dim // 2, generator=g) * 100
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    q, k, cos, sin = (t.to(device=device, dtype=dtype) for t in (q, k, cos, sin))
    half = head_dim // 2
    with torch.inference_mode():
        want = torch.cat(rotate(q, k, cos, sin), 1)[:, :, 0]  # (2, 4, D)
        both = torch.cat((q, k), 1)[:, :, 0]
        signed = torch.cat((-sin[..., :half], sin[..., half:]), -1)
        got = both * cos + both.roll(half, -1) * signed
    tol = 4 * torch.finfo(dtype).eps * float(want.abs().max())
    return bool((want.float() - got.float()).abs().max() <= tol)
