"""Precision modes: float16, int8 and int4 weights of a loaded model.

``quantize_int8(model, dtype)`` replaces the linear layers (``nn.Linear`` and
transformers' GPT-2 style ``Conv1D``) whose input width is a multiple of 16 by an
:class:`Int8Linear`: the weight is stored as int8, one symmetric scale per output
channel (``scale = max |w_row| / 127``), and the product runs as
``torch.ops.aten._weight_int8pack_mm``. Decoding one token reads every weight once, so
on a CPU it is bound by memory bandwidth: int8 weights are a quarter of the bytes of
float32.

Around the layers the activations keep the model's ``dtype``. With float32 (the CPU's
default) only the kernel's input is rounded to bfloat16 and its output cast back: the
kernel is 40x slower with float32 inputs, while the residual stream, norms, attention
and KV stay in float32, which is both closer to float32 (KL 0.0054 -> 0.0049 nats on
SmolLM2) and faster on a CPU than running them in bfloat16.

The output layer (``lm_head``) gets its own copy, also when it is tied to the input
embeddings (the embedding keeps its float weight for the lookup). For SmolLM2-135M it
is a fifth of all weights, so leaving it in float32 would cost a quarter of int8's
speed. The value projections are not quantized to int8 (``KEEP``). On an x86 CPU with
float32 activations the output layer and the value projections take float16 weights
(:class:`F16Linear`), as llama.cpp's quantized files keep their output tensor at a
higher precision: one row of SmolLM2's 49152x576 output layer costs 1.6 ms through
fbgemm's float16 product against 3.7 ms through the int8 kernel (which is bound by its
arithmetic, not its bytes, at about 8 GB/s), and a value projection about a fifth of
its float32 product. A decode step is 10-15% faster, the model a little closer to
float32, and the output layer 28 MB larger than in int8. Elsewhere (a GPU, no fbgemm)
the output layer is int8 and the value projections stay in the activations' dtype.

Where the aten kernel is missing on a device (it exists on CPU and MPS; CUDA builds may
lack it) :class:`Int8Linear` falls back to dequantizing the weight per call, which is
correct but not fast.

``quantize_int4`` does the same with 4-bit weights in groups of 32 along the input
(one bfloat16 scale and offset per group, as llama.cpp's Q4_1 stores them), multiplied
by ``torch.ops.aten._weight_int4pack_mm_for_cpu``. It reads an eighth of float32's
bytes, and its kernel is far faster than the int8 one on wide layers (SmolLM2's
49152x576 output layer, one row: 0.8 ms, against 5.9 ms for int8 and 6.9 ms for
float32 on this machine's CPU). It is the mode to compare with llama.cpp's Q4 files;
it costs more fidelity than int8 (the bench's precision table says how much).

``quantize_f16`` keeps every linear layer's weight as float16 and multiplies in
float32 (``F16Linear``): on an x86 CPU through fbgemm's half-precision product
(``torch.ops.quantized.linear_dynamic_fp16``, PyTorch's own op for float16 weights),
which reads half float32's bytes and widens them in registers. SmolLM2-135M's products,
one thread, weights streamed from memory: one row 11.8 ms against 33.5 ms for float32,
a block of 4 rows 17.1 against 48.2 ms, 64 rows or more level with oneDNN's float32.
Rounding a weight to float16 moves it by at most 2^-11 of itself, so the model barely
moves (the bench's precision table gives the KL). With fbgemm's AVX-512 kernels each
row's product is the same bit for bit whether the row is alone or in a block: one token
at a time equals a recompute exactly. Its AVX2 kernels multiply a block of one or two
rows in another order than a block of three or more (seen on an AMD EPYC without
AVX-512), so there a row alone and in a block differ in float32 noise, about 1e-7 of
the values; :func:`fbgemm_rows_agree` says which holds here. Where fbgemm is missing (off x86, on a GPU) the layer multiplies
by its float16 weight cast to the activations' dtype: right, not fast.

Quantized models are not exact against float32: ``loomterm bench``'s precision table
reports their fidelity (KL of next-token distributions to float32). Within one
precision every loom operation still equals a recompute in that same precision.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from loomterm.engine.kernels.int_layers import (
    INT4_GROUP,
    K_MULTIPLE,
    PREFILL_ROWS,
    Int4Linear,
    Int8Linear,
    int8_kernel_available,
)
from loomterm.engine.kernels.rows_linear import RowsLinear

# Names callers import from here: the integer layers live in ``int_layers``.
__all__ = [
    "F16_MAX",
    "F16_NAMES",
    "INT4_GROUP",
    "KEEP",
    "PREFILL_ROWS",
    "QUANT_MODES",
    "F16Linear",
    "Int4Linear",
    "Int8Linear",
    "decode_layout",
    "fbgemm_available",
    "kernel_dtype_for",
    "normalise_quant",
    "precision_label",
    "quantize",
    "quantize_f16",
    "quantize_int4",
    "quantize_int8",
]

QUANT_MODES = ("none", "f16", "int8", "int4")
F16_NAMES = ("f16", "fp16", "float16", "half")  # what ``normalise_quant`` reads as f16
F16_MAX = 65504.0  # the largest float16: a layer with a larger weight stays float
# Layers left unquantized, by name: the value projections. On SmolLM2-135M they are
# 2.5% of the weights but a fifth of int8's error (KL to float32 0.0049 -> 0.0040
# nats over the bench corpus when kept), for 1.5% of the decode speed.
KEEP = ("v_proj",)


def normalise_quant(quant: str | None) -> str:
    """``None``, ``""``, ``"none"``, ``"off"`` -> ``"none"``; ``"fp16"``, ``"float16"``
    -> ``"f16"``; ``"int8"``, ``"int4"`` stay."""
    text = (quant or "none").strip().lower()
    if text in ("none", "off", "no", "false", "fp", "float"):
        return "none"
    if text in F16_NAMES:
        return "f16"
    if text not in QUANT_MODES:
        raise ValueError(f"unknown quantization {quant!r} (use none, f16, int8 or int4)")
    return text


class F16Linear(RowsLinear):
    """``y = x @ w.T + bias`` with ``w`` stored as float16 and the product in float32
    (see the module docstring).

    ``packed`` holds fbgemm's packed weight (with the bias) where fbgemm runs, else
    None and ``weight16`` the (out, in) float16 weight for the plain product.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        w = weight.detach().float()
        b = None if bias is None else bias.detach().float().clone()
        self.packed = None
        if w.device.type == "cpu" and fbgemm_available():
            # An opaque object, not a buffer: ``module.to(dtype)`` leaves it alone.
            self.packed = torch.ops.quantized.linear_prepack_fp16(w.contiguous(), b)
            weight16 = None
        else:
            weight16 = w.to(torch.float16)
        self.register_buffer("weight16", weight16, persistent=False)
        self.register_buffer("bias", None if self.packed is not None else b, persistent=False)

    @property
    def weight(self) -> torch.Tensor:
        """The (out, in) weight, float16 values in float32 (for inspection)."""
        if self.packed is not None:
            return torch.ops.quantized.linear_unpack_fp16(self.packed)[0]
        return self.weight16.float()

    def _apply(self, fn, recurse=True):
        # ``module.to(dtype)`` must not cast the float16 weight (a device move may).
        weight16, bias = self.weight16, self.bias
        super()._apply(fn, recurse)
        if weight16 is not None:
            self.weight16 = weight16.to(self.weight16.device)
        if bias is not None:
            self.bias = bias.to(self.bias.device)
        return self

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, in) -> (rows, out) in ``x``'s dtype, bias added."""
        if self.packed is not None and x.dtype == torch.float32:
            return torch.ops.quantized.linear_dynamic_fp16(x.contiguous(), self.packed)
        if self.packed is not None:  # another activation dtype: float32 in and out
            return self.product(x.float()).to(x.dtype)
        y = torch.nn.functional.linear(x, self.weight16.to(x.dtype))
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def extra_repr(self) -> str:
        kernel = "fbgemm" if self.packed is not None else "plain"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None or self.packed is not None}, float16 weights ({kernel})"
        )


@functools.cache
def fbgemm_available() -> bool:
    """Whether fbgemm's float16-weight product runs here and multiplies right."""
    try:
        w = torch.ones(16, 32)  # (out, in)
        packed = torch.ops.quantized.linear_prepack_fp16(w, None)
        out = torch.ops.quantized.linear_dynamic_fp16(torch.ones(1, 32), packed)
        return bool(torch.equal(out, torch.full((1, 16), 32.0)))
    except (RuntimeError, NotImplementedError, AttributeError):
        return False


@functools.cache
def fbgemm_rows_agree() -> bool:
    """Whether fbgemm's float16 product gives a row the same bits alone and in blocks
    of every size up to 16 here (its AVX-512 kernels do; its AVX2 kernels do not: see
    the module docstring). False where fbgemm does not run."""
    if not fbgemm_available():
        return False
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(48, 64, generator=generator)  # (out, in)
    x = torch.randn(16, 64, generator=generator)  # (rows, in)
    packed = torch.ops.quantized.linear_prepack_fp16(w, None)
    alone = torch.cat(
        [torch.ops.quantized.linear_dynamic_fp16(x[i : i + 1], packed) for i in range(16)]
    )
    return all(
        torch.equal(torch.ops.quantized.linear_dynamic_fp16(x[:rows], packed), alone[:rows])
        for rows in range(2, 17)
    )


def _linear_weight(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(weight (out, in), bias) of a linear layer, or None for anything else."""
    if isinstance(module, nn.Linear):
        return module.weight, module.bias
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover - transformers always has it
        return None
    if isinstance(module, Conv1D):  # GPT-2's layers store the weight as (in, out)
        return module.weight.t(), module.bias
    return None


def kernel_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """The dtype the int8 kernel runs in around activations of ``dtype``: the same for
    bfloat16 and float16, bfloat16 for float32 (with float32 inputs the CPU kernel is
    about 40x slower)."""
    return dtype if dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def quantize(
    model: nn.Module, quant: str, dtype: torch.dtype, keep: tuple[str, ...] = KEEP
) -> dict[str, int]:
    """Quantize ``model`` in place to ``quant`` (``f16``, ``int8`` or ``int4``); see the
    module docstring. Returns counts: layers quantized, layers kept."""
    if quant == "f16":
        return quantize_f16(model, dtype)
    if quant == "int4":
        return quantize_int4(model, dtype, keep)
    return quantize_int8(model, dtype, keep)


def quantize_f16(model: nn.Module, dtype: torch.dtype) -> dict[str, int]:
    """Replace ``model``'s linear layers by :class:`F16Linear` in place (every one whose
    weights fit float16's range: a larger weight would saturate), then cast what is
    left to ``dtype``. No layer is kept back: float16 weights cost the value
    projections nothing worth keeping them for."""
    return _replace_linears(model, dtype, (), fits=_f16_fits, make=_f16_layer)


def quantize_int4(
    model: nn.Module, dtype: torch.dtype, keep: tuple[str, ...] = KEEP
) -> dict[str, int]:
    """Replace ``model``'s linear layers by :class:`Int4Linear` in place (input width a
    multiple of 32, output a multiple of 16; the rest, and ``keep``, stay), then cast
    what is left to ``dtype``."""
    return _replace_linears(
        model,
        dtype,
        keep,
        fits=lambda w: w.shape[1] % INT4_GROUP == 0 and w.shape[0] % 16 == 0,
        make=lambda w, b, device: Int4Linear.from_weight(w.to(device), b).to(device),
    )


def quantize_int8(
    model: nn.Module, dtype: torch.dtype, keep: tuple[str, ...] = KEEP
) -> dict[str, int]:
    """Replace ``model``'s linear layers by :class:`Int8Linear` in place (see the module
    docstring), then cast what is left (norms, embeddings, kept layers) to ``dtype``,
    the activations' dtype. Layers whose name ends with one of ``keep``, and those the
    kernel cannot take, stay out of int8: with float16 weights on an x86 CPU with float32
    activations (as the output layer then has), else as they are. Returns counts: layers
    quantized, layers kept (the output layer among them when it is float16)."""
    kernel = kernel_dtype_for(dtype)
    packed: list[bool] = []
    device = next(model.parameters()).device
    near_exact = None
    if device.type == "cpu" and dtype == torch.float32 and fbgemm_available():
        near_exact = _f16_layer  # the output layer and the kept layers (module docstring)

    def make(weight, bias, device):
        if not packed:
            packed.append(int8_kernel_available(device, kernel))
        layer = Int8Linear.from_weight(weight, bias, kernel).to(device)
        layer.packed = packed[0]
        return layer

    return _replace_linears(
        model,
        dtype,
        keep,
        fits=lambda w: w.shape[1] % K_MULTIPLE == 0,
        make=make,
        near_exact=near_exact,
    )


def _f16_fits(weight: torch.Tensor) -> bool:
    """Whether float16 holds every value of ``weight`` (a larger one would saturate)."""
    return bool(weight.detach().abs().max() <= F16_MAX)


def _f16_layer(weight: torch.Tensor, bias: torch.Tensor | None, device) -> nn.Module:
    return F16Linear(weight.to(device), bias)


LayerMaker = Callable[..., nn.Module]  # make(weight, bias, device): the new layer


def _replace_linears(
    model: nn.Module, dtype: torch.dtype, keep, fits, make, near_exact=None
) -> dict[str, int]:
    """Swap every linear layer that ``fits`` (and is not named in ``keep``) for
    ``make(weight, bias, device)``, untie a tied output layer, cast the rest.

    ``near_exact``: when given, the output layer and the layers ``make`` does not take
    are made by it instead, where their weights fit float16 (``_f16_layer``); they are
    counted as kept."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    targets: list[tuple[nn.Module, str, tuple[torch.Tensor, torch.Tensor | None], LayerMaker]] = []
    counts = {"quantized": 0, "kept": 0}
    for parent in model.modules():
        for name, child in parent.named_children():
            found = _linear_weight(child)
            if found is None:
                continue
            taken = not name.endswith(keep) and fits(found[0])
            if near_exact is not None and (child is output or not taken):
                if _f16_fits(found[0]):
                    targets.append((parent, name, found, near_exact))
                counts["kept"] += 1
            elif taken:
                targets.append((parent, name, found, make))
                counts["quantized"] += 1
            else:
                counts["kept"] += 1
    device = next(model.parameters()).device
    for parent, name, (weight, bias), maker in targets:
        # A tied output layer shares its Parameter with the input embedding: replacing
        # the module unties them, and the embedding keeps the float weight.
        setattr(parent, name, maker(weight, bias, device))
    if output is not None and getattr(model.config, "tie_word_embeddings", False):
        # transformers must not re-tie the new module to the embedding (``tie_weights``).
        model.config.tie_word_embeddings = False
    model.to(dtype)  # floats only: quantized weights and their scales keep their dtypes
    return counts


def precision_label(dtype: torch.dtype, quant: str) -> str:
    """How the status bar and the bench name a mode: ``float32``, ``bfloat16``,
    ``int8 (bfloat16)``."""
    name = str(dtype).removeprefix("torch.")
    return name if quant == "none" else f"{quant} ({name})"


def decode_layout(model: nn.Module) -> int:
    """Store each float32 ``nn.Linear`` weight (out, in) as the transpose of a
    contiguous (in, out) matrix, in place; returns how many were changed.

    ``F.linear`` then multiplies one row by a contiguous (in, out) matrix, which on a
    CPU streams the weight about 1.5x faster than the (out, in) layout (measured for
    SmolLM2's layers: 30 x 1536x576 in 4.0 ms instead of 6.4 ms, the 49152x576 output
    layer in 3.9 instead of 6.7), and no slower for batches of 8 rows or prefill. The
    values are the same; the product sums in another order (float32 noise). A tied
    output layer shares the Parameter with the embedding, which then gathers its rows
    from strided columns (14 ms for 2,000 tokens). Only float32: for bfloat16 the
    (out, in) layout is the faster one.
    """
    changed = 0
    seen: set[int] = set()
    for module in model.modules():
        if not isinstance(module, nn.Linear):
            continue
        weight = module.weight
        if id(weight) in seen or weight.dtype != torch.float32 or weight.device.type != "cpu":
            continue
        if weight.is_mkldnn:  # oneDNN's own layout (``cpu_linear.use_onednn``)
            continue
        seen.add(id(weight))
        if weight.dim() == 2 and weight.stride() == (1, weight.shape[0]):
            continue  # already laid out so
        weight.data = weight.data.t().contiguous().t()
        changed += 1
    return changed
