"""Fused quantized projections for the decode step: one product where the model runs two.

A Llama-family layer multiplies the same input by q, k and v, and by gate and up.
:func:`fuse_layer` concatenates each run of those layers that share a kind
(:class:`Int8Linear`, or :class:`Int4Linear`, with the same bias presence) into ONE
layer of that kind, and makes the model's own layers views into the fused tensors: no
weight is stored twice, the model's modules keep their class, and the generic forward
(prefill, verification blocks) runs them as before. With the default ``KEEP`` the
value projection stays float, so q/k fuse and v does not.

- :class:`Int8Linear`: ``weight``, ``scales``, ``bias`` become row slices (contiguous).
- :class:`Int4Linear`: ``packed`` becomes a row slice of the fused packed weight, so
  each part reads its own bytes. The CPU kernel packs rows in blocks whose size follows
  the CPU's vector width (64 with AVX-512, smaller below it), so the fused product is
  right only where every part but the last fills whole blocks; each fused product is
  checked against its parts on a probe, and a run that would differ is cut short (with
  AVX-512, the tiny test models' 32-row k_proj ends its run). The kernel reads ``scales_and_zeros``
  (in / 32, out, 2) only contiguous (a strided slice gives wrong numbers, silently),
  and a part's slice of the fused one is not, so the parts keep their own: the fused
  layer's copy is the one extra, 1/8 byte per weight of the fused layers: 8.3 MB, 4.0%
  of SmolLM2-135M's int4 model (int8: none), for a step about 5% faster than unfused
  (8.2-8.6 against 8.9-9.2 ms), against a copy per call on every generic forward.

Float ``nn.Linear`` layers are not fused. A part that is a strided view of a fused
float weight runs at ``F.linear``'s speed, but oneDNN's inner product (which
``cpu_linear`` uses for blocks of rows) takes 200x longer on such a view, and for one
row fusing q/k/v and gate/up saved only 1.5% of a float32 step.

For the int8 and int4 kernels a fused product's columns equal the parts' products bit
for bit (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from loomterm.engine.kernels.quant import Int4Linear, Int8Linear

ATTENTION = ("q_proj", "k_proj", "v_proj")
MLP = ("gate_proj", "up_proj")


@dataclass(frozen=True)
class Group:
    """One product covering ``names`` (consecutive parts), ``widths`` their outputs."""

    module: nn.Module
    names: tuple[str, ...]
    widths: tuple[int, ...]


@dataclass(frozen=True)
class FusedLayer:
    """The products of one decoder layer: attention's q/k/v and the MLP's gate/up."""

    attention: tuple[Group, ...]
    mlp: tuple[Group, ...]


def fuse_layer(layer: nn.Module) -> FusedLayer:
    """Fuse ``layer``'s q/k/v and gate/up (see the module docstring), once: a layer
    fused before (another step over the same model) returns the same groups."""
    done = getattr(layer, "_loomterm_fused", None)
    if done is not None:
        return done
    attention = _fuse_runs(layer.self_attn, ATTENTION)
    mlp = _fuse_runs(layer.mlp, MLP) if all(hasattr(layer.mlp, n) for n in MLP) else ()
    fused = FusedLayer(attention, mlp)
    # A plain attribute (not a submodule): the fused layers stay out of the model's
    # modules, parameters and state dict, so nothing is counted or saved twice.
    object.__setattr__(layer, "_loomterm_fused", fused)
    return fused


def _fuse_runs(parent: nn.Module, names: tuple[str, ...]) -> tuple[Group, ...]:
    """Groups over ``names`` in order: each run of parts of one kind fused into one."""
    runs: list[list[str]] = []
    for name in names:
        kind = _kind(getattr(parent, name))
        if runs and kind is not None and kind == _kind(getattr(parent, runs[-1][0])):
            runs[-1].append(name)
        else:
            runs.append([name])
    groups: list[Group] = []
    for run in runs:
        parts = [getattr(parent, n) for n in run]
        while parts:
            taken, module = _fuse_longest(parts)
            names = tuple(run[: len(taken)])
            groups.append(Group(module, names, tuple(_out_features(p) for p in taken)))
            parts, run = parts[len(taken) :], run[len(taken) :]
    return tuple(groups)


def _fuse_longest(parts: list[nn.Module]) -> tuple[list[nn.Module], nn.Module]:
    """Fuse the longest leading run of ``parts`` whose fused product gives the parts'
    numbers on a probe (the int4 kernel packs rows in blocks, 64 with AVX-512, so a part
    that does not fill whole blocks can only end a run); (the parts, the layer)."""
    for count in range(len(parts), 1, -1):
        taken = parts[:count]
        fused, point = _fuse(taken)
        if _same_products(fused, taken):
            point()  # now the parts read the fused tensors
            return taken, fused
    return parts[:1], parts[0]


def _same_products(fused: nn.Module, parts: list[nn.Module]) -> bool:
    x = torch.randn(2, parts[0].in_features, generator=torch.Generator().manual_seed(0))
    x = x.to(next(iter(fused.buffers())).device)
    with torch.inference_mode():
        got = fused(x).split([_out_features(p) for p in parts], -1)
        return all(torch.equal(a, p(x)) for a, p in zip(got, parts, strict=True))


def _kind(module: nn.Module) -> tuple | None:
    """What must agree for two layers to fuse (None: this one never fuses)."""
    has_bias = getattr(module, "bias", None) is not None
    if type(module) is Int8Linear:
        return ("int8", module.scales.dtype, module.weight.device, module.in_features,
                module.packed, has_bias)  # fmt: skip
    if type(module) is Int4Linear:
        return ("int4", module.packed.device, module.in_features, module.kernel, has_bias)
    return None


def _out_features(module: nn.Module) -> int:
    return int(getattr(module, "out_features", None) or module.weight.shape[0])


def _spans(parts: list[nn.Module]) -> list[slice]:
    spans, start = [], 0
    for part in parts:
        width = _out_features(part)
        spans.append(slice(start, start + width))
        start += width
    return spans


def _fuse(parts: list[nn.Module]) -> tuple[nn.Module, Callable[[], None]]:
    """One layer over the concatenated outputs of ``parts`` (all of one ``_kind``), and
    the call that makes the parts' tensors views into it."""
    spans = _spans(parts)
    first = parts[0]
    bias = None if first.bias is None else torch.cat([p.bias for p in parts])  # (out,)
    if type(first) is Int8Linear:
        weight = torch.cat([p.weight for p in parts])  # (out, in) int8
        scales = torch.cat([p.scales for p in parts])  # (out,)
        fused = Int8Linear(weight, scales, bias)
        fused.packed = first.packed

        def point() -> None:
            for part, span in zip(parts, spans, strict=True):
                part.weight, part.scales = weight[span], scales[span]
                if bias is not None:
                    part.bias = bias[span]

        return fused, point
    packed = torch.cat([p.packed for p in parts])  # (out, in / 2) uint8, or (out, in)
    sz = torch.cat([p.scales_and_zeros for p in parts], dim=1)  # (in / 32, out, 2)
    fused = Int4Linear(packed, sz, bias, (spans[-1].stop, first.in_features), first.kernel)

    def point() -> None:  # the scales stay each part's own (module docstring)
        for part, span in zip(parts, spans, strict=True):
            part.packed = packed[span]
            if bias is not None:
                part.bias = bias[span]

    return fused, point
