"""Fused quantized projections (``engine.kernels.fused``): one product over concatenated weights
equals the parts' products, the parts become views of the fused tensors (no weight
stored twice), and a model whose layers were fused computes what it did before."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from loomterm.engine import Loom
from loomterm.engine.kernels.fused import fuse_layer
from loomterm.engine.kernels.quant import INT4_GROUP, Int4Linear, Int8Linear
from loomterm.engine.models.load import load_model
from tests.tiny_models import build_tiny_family


def _layers(kind: str, widths, bias: bool, inputs: int = 64):
    torch.manual_seed(sum(widths))
    made = []
    for width in widths:
        weight = torch.randn(width, inputs)
        b = torch.randn(width) if bias else None
        if kind == "int8":
            made.append(Int8Linear.from_weight(weight, b, torch.bfloat16))
        else:
            made.append(Int4Linear.from_weight(weight, b))
    return made


class _Attention(nn.Module):
    def __init__(self, parts):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = parts


class _Mlp(nn.Module):
    def __init__(self, gate, up):
        super().__init__()
        self.gate_proj, self.up_proj = gate, up
        self.down_proj = nn.Linear(gate.out_features, gate.in_features)


class _Layer(nn.Module):
    def __init__(self, attention, mlp):
        super().__init__()
        self.self_attn, self.mlp = attention, mlp


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("widths", [(64, 64, 32), (128, 64, 16), (576, 192, 192)])
def test_a_fused_product_is_the_parts_products_bit_for_bit(kind, bias, widths):
    parts = _layers(kind, widths, bias)
    x = torch.randn(5, 64)
    before = [p(x) for p in parts]
    gate, up = _layers(kind, (128, 128), bias)
    mlp_before = [gate(x), up(x)]
    layer = _Layer(_Attention(parts), _Mlp(gate, up))
    fused = fuse_layer(layer)
    (group,) = fused.attention
    assert group.names == ("q_proj", "k_proj", "v_proj") and group.widths == widths
    assert type(group.module) is type(parts[0])
    for rows in (1, 3, 5):
        whole = group.module(x[:rows])  # (rows, sum(widths))
        for got, want in zip(whole.split(list(widths), -1), before, strict=True):
            assert torch.equal(got, want[:rows])
    for part, want in zip(parts, before, strict=True):  # the parts, now views, too
        assert torch.equal(part(x), want)
    (mlp,) = fused.mlp
    for got, want in zip(mlp.module(x).split([128, 128], -1), mlp_before, strict=True):
        assert torch.equal(got, want)
    # The quantized weights are stored once: each part reads the fused tensor's memory.
    big = group.module.weight if kind == "int8" else group.module.packed
    for part in parts:
        own = part.weight if kind == "int8" else part.packed
        assert _storage(own) == _storage(big)
    assert fuse_layer(layer) is fused  # a second step over the model reuses the groups


def _concatenation_is_exact(parts, x) -> bool:
    """The kernel's own answer, whatever CPU this is: does one int4 layer over the parts'
    packed rows laid end to end give each part's product bit for bit? (How many rows the
    kernel packs per block depends on the CPU's vector width, so no row count is assumed.)"""
    packed = torch.cat([p.packed for p in parts])
    sz = torch.cat([p.scales_and_zeros for p in parts], 1)  # (in / 32, out, 2)
    bias = None if parts[0].bias is None else torch.cat([p.bias for p in parts])
    width = sum(p.out_features for p in parts)
    whole = Int4Linear(packed, sz, bias, (width, parts[0].in_features), parts[0].kernel)
    got = whole(x).split([p.out_features for p in parts], -1)
    return all(torch.equal(a, p(x)) for a, p in zip(got, parts, strict=True))


@pytest.mark.parametrize(
    ("kind", "widths"),
    [
        ("int8", (48, 16, 16)),
        ("int4", (48, 16, 16)),
        ("int4", (64, 32, 32)),  # a narrower part may only end a run on some CPUs
        ("int4", (32, 64, 64)),
        ("int4", (64, 64, 64)),
    ],
)
def test_runs_stop_where_the_fused_product_would_differ(kind, widths):
    """Each group is exact, and each run is as long as it can be: a group is cut only
    where adding the next part would change the numbers on this CPU's kernel."""
    parts = _layers(kind, widths, bias=True)
    x = torch.randn(3, 64)
    want = [p(x) for p in parts]
    fresh = _layers(kind, widths, bias=True)  # the same weights, never fused
    groups = fuse_layer(_Layer(_Attention(parts), nn.Identity())).attention
    assert [n for g in groups for n in g.names] == ["q_proj", "k_proj", "v_proj"]
    got = [y for g in groups for y in g.module(x).split(list(g.widths), -1)]
    for a, b, part in zip(got, want, parts, strict=True):
        assert torch.equal(a, b) and torch.equal(part(x), b)
    if kind == "int8":  # row slices of an int8 product are always exact
        assert [len(g.names) for g in groups] == [3]
        return
    start = 0
    for group in groups[:-1]:
        end = start + len(group.names)
        assert not _concatenation_is_exact(fresh[start : end + 1], x), group.names
        start = end
    if all(w % 64 == 0 for w in widths[:-1]):  # whole blocks on every CPU's kernel
        assert len(groups) == 1


def test_parts_of_different_kinds_fuse_in_runs():
    """The default KEEP leaves v_proj float: q and k fuse, v stays as it is."""
    q, k = _layers("int4", (64, 32), bias=False)
    v = nn.Linear(64, 32)
    layer = _Layer(_Attention((q, k, v)), nn.Identity())
    x = torch.randn(2, 64)
    want = [q(x), k(x), v(x)]
    fused = fuse_layer(layer)
    first, second = fused.attention
    assert first.names == ("q_proj", "k_proj") and second.names == ("v_proj",)
    assert second.module is v and fused.mlp == ()
    got = [*first.module(x).split([64, 32], -1), second.module(x)]
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_int4_parts_keep_contiguous_scales():
    """The kernel reads scales only contiguous (a strided slice gives wrong numbers):
    each part keeps its own, the fused layer has the concatenation."""
    parts = _layers("int4", (64, 64, 32), bias=False)
    layer = _Layer(_Attention(parts), nn.Identity())
    (group,) = fuse_layer(layer).attention
    for part in parts:
        assert part.scales_and_zeros.is_contiguous()
    want = torch.cat([p.scales_and_zeros for p in parts], 1)
    assert torch.equal(group.module.scales_and_zeros, want)
    assert group.module.scales_and_zeros.shape == (64 // INT4_GROUP, 160, 2)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_a_fused_model_forwards_as_before(family, quant, tiny_llama_dir, tmp_path):
    """A loom makes the decode step, which fuses the layers: the generic forward (the
    model's own modules, now views) gives the logits it gave before, exactly."""
    folder = tiny_llama_dir if family == "llama" else build_tiny_family(tmp_path / "q", family)
    loaded = load_model(str(folder), device="cpu", dtype="float32", quant=quant)
    ids = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])  # (1, T)
    with torch.inference_mode():
        before = loaded.model(input_ids=ids).logits
    loom = Loom.from_loaded(loaded)
    layer = loaded.model.model.layers[0]
    assert getattr(layer, "_loomterm_fused", None) is not None
    assert loom.runner.step is not None
    with torch.inference_mode():
        after = loaded.model(input_ids=ids).logits
    assert torch.equal(before, after)
    fused = fuse_layer(layer)
    assert fused.attention[0].names == ("q_proj", "k_proj")  # v_proj kept float
    assert fused.mlp[0].names == ("gate_proj", "up_proj")
    assert Loom.from_loaded(loaded).runner.step.plan  # a second loom: no second fusion
    assert fuse_layer(layer) is fused
