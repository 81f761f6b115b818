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
moves (the bench's precision table gives the KL), and each row's product is the same
bit for bit whether the row is alone or in a block: one token at a time equals a
recompute exactly. Where fbgemm is missing (off x86, on a GPU) the layer multiplies
by its float16 weight cast to the activations' dtype: right, not fast.

Quantized models are not exact against float32: ``loomterm bench``'s precision table
reports their fidelity (KL of next-token distributions to float32). Within one
precision every loom operation still equals a recompute in that same precision.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

QUANT_MODES = ("none", "f16", "int8", "int4")
F16_NAMES = ("f16", "fp16", "float16", "half")  # what ``normalise_quant`` reads as f16
F16_MAX = 65504.0  # the largest float16: a layer with a larger weight stays float
INT4_GROUP = 32  # input columns per int4 scale and offset (llama.cpp Q4_1 uses 32)
# From this many rows on (a prefill), converting the int8 weight to the kernel dtype
# and running an ordinary matrix product is faster than the int8 kernel (on this CPU:
# 2x at 64 rows, even at about 20).
PREFILL_ROWS = 24
# Layers left unquantized, by name: the value projections. On SmolLM2-135M they are
# 2.5% of the weights but a fifth of int8's error (KL to float32 0.0049 -> 0.0040
# nats over the bench corpus when kept), for 1.5% of the decode speed.
KEEP = ("v_proj",)
# _weight_int8pack_mm reads the input width in blocks of 16 (other widths give wrong
# numbers or crash), so narrower or odd layers stay in ``compute_dtype``.
_K_MULTIPLE = 16
# The kernels, looked up once: ``torch._name`` where torch binds it (0.6 us a call
# less than ``torch.ops.aten._name``, which also resolves its overload per call).
_INT8_MM = getattr(torch, "_weight_int8pack_mm", None) or torch.ops.aten._weight_int8pack_mm
_INT4_MM = (
    getattr(torch, "_weight_int4pack_mm_for_cpu", None)
    or torch.ops.aten._weight_int4pack_mm_for_cpu
)


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


class Int8Linear(nn.Module):
    """``y = x @ (q * scale).T + bias`` with int8 ``q`` (out, in) and per-row ``scale``.

    ``weight`` holds the int8 values (so ``weight.shape`` reads as a Linear's), and
    ``scales`` the (out,) scales in the compute dtype. Inputs of another dtype are cast
    to the compute dtype and the output is cast back.
    """

    def __init__(self, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer("scales", scales, persistent=False)
        self.register_buffer("bias", bias, persistent=False)
        self.packed = True  # False: the kernel is missing here, dequantize per call

    @classmethod
    def from_weight(
        cls, weight: torch.Tensor, bias: torch.Tensor | None, compute_dtype: torch.dtype
    ) -> Int8Linear:
        """Quantize a float (out, in) weight, per output channel, symmetric."""
        w = weight.detach().float()
        scales = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0  # (out,)
        q = torch.round(w / scales[:, None]).clamp_(-127, 127).to(torch.int8)
        bias = None if bias is None else bias.detach().to(compute_dtype).clone()
        return cls(q.contiguous(), scales.to(compute_dtype), bias)

    def _apply(self, fn, recurse=True):
        # ``module.to(dtype)`` casts every float buffer; the scales (and bias) stay in
        # the kernel's dtype whatever the activations around the layer are.
        kernel = self.scales.dtype
        super()._apply(fn, recurse)
        self.scales = self.scales.to(kernel)
        if self.bias is not None:
            self.bias = self.bias.to(kernel)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        y = self.product(x if x.dim() == 2 else x.reshape(-1, self.in_features))
        if x.dim() != 2:
            y = y.view(*x.shape[:-1], self.out_features)
        return y if y.dtype == dtype else y.to(dtype)

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, in) -> (rows, out), bias added, NOT cast back: in the kernel's dtype
        where the int8 kernel ran (the decode step lets float32 arithmetic promote
        it, which equals casting first). Every call that would be a no-op is skipped:
        at one row each costs about what a small kernel does."""
        dtype = x.dtype
        flat = x if dtype == self.scales.dtype else x.to(self.scales.dtype)
        if self.packed and flat.shape[0] < PREFILL_ROWS:
            if not flat.is_contiguous():
                flat = flat.contiguous()
            y = _INT8_MM(flat, self.weight, self.scales)
        else:
            # int8 values are exact in the kernel dtype; the product is rounded once to
            # it, then scaled in the activations' dtype (float32: no second rounding).
            y = torch.nn.functional.linear(flat, self.weight.to(flat.dtype))
            y = y.to(dtype) * self.scales.to(dtype)
        if self.bias is not None:
            y = y + (self.bias if self.bias.dtype == y.dtype else self.bias.to(y.dtype))
        return y

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, int8 per channel, {self.scales.dtype}"
        )


class Int4Linear(nn.Module):
    """``y = x @ w.T + bias`` with ``w`` stored as 4-bit integers in groups of
    :data:`INT4_GROUP` input columns: ``w = (q - 8) * scale + offset`` per group.

    ``packed`` holds the weight in the layout of ``_weight_int4pack_mm_for_cpu``;
    ``scales_and_zeros`` is (in / group, out, 2) in bfloat16. Where that kernel is
    missing (off the CPU) the layer keeps ``q`` as uint8 and dequantizes per call:
    correct, not fast.
    """

    def __init__(
        self,
        packed: torch.Tensor,
        scales_and_zeros: torch.Tensor,
        bias: torch.Tensor | None,
        shape: tuple[int, int],
        kernel: bool,
    ):
        super().__init__()
        self.out_features, self.in_features = shape
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales_and_zeros", scales_and_zeros, persistent=False)
        self.register_buffer("bias", bias, persistent=False)
        self.kernel = kernel  # False: ``packed`` is plain q (out, in) as uint8

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized (out, in) weight in bfloat16 (for inspection and fallback)."""
        n, k, g = self.out_features, self.in_features, INT4_GROUP
        if self.kernel:
            eye = torch.eye(k, dtype=torch.bfloat16, device=self.packed.device)
            return self._product(eye).t().contiguous()  # (out, in): x = I reads w.T
        sz = self.scales_and_zeros.transpose(0, 1)  # (out, in / g, 2)
        q = self.packed.view(n, k // g, g).to(torch.bfloat16)
        return ((q - 8) * sz[..., :1] + sz[..., 1:]).view(n, k)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> Int4Linear:
        """Quantize a float (out, in) weight: per group of 32 inputs, 16 levels from the
        group's minimum to its maximum (asymmetric, as Q4_1)."""
        n, k = weight.shape
        g = INT4_GROUP
        w = weight.detach().float().view(n, k // g, g)  # (out, groups, g)
        low, high = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
        scale = ((high - low) / 15).clamp(min=1e-8)  # (out, groups, 1)
        q = torch.round((w - low) / scale).clamp_(0, 15).to(torch.int32).view(n, k)
        zero = low + 8 * scale  # the kernel computes (q - 8) * scale + zero
        sz = torch.cat([scale, zero], -1).transpose(0, 1).contiguous().to(torch.bfloat16)
        bias = None if bias is None else bias.detach().to(torch.bfloat16).clone()
        kernel = weight.device.type == "cpu" and _int4_kernel_available()
        if kernel:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        else:
            packed = q.to(torch.uint8)
        return cls(packed, sz, bias, (n, k), kernel)

    def _product(self, flat: torch.Tensor) -> torch.Tensor:
        return _INT4_MM(flat, self.packed, INT4_GROUP, self.scales_and_zeros)

    def _apply(self, fn, recurse=True):
        # ``module.to(dtype)`` must not cast the packed weight, scales or bias.
        kept = self.packed, self.scales_and_zeros, self.bias
        super()._apply(fn, recurse)
        device = self.packed.device
        self.packed = kept[0].to(device)
        self.scales_and_zeros = kept[1].to(device)
        self.bias = None if kept[2] is None else kept[2].to(device)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        y = self.product(x if x.dim() == 2 else x.reshape(-1, self.in_features))
        if x.dim() != 2:
            y = y.view(*x.shape[:-1], self.out_features)
        return y if y.dtype == dtype else y.to(dtype)

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, in) -> (rows, out) in bfloat16, bias added, NOT cast back (see
        :meth:`Int8Linear.product`)."""
        flat = x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16)
        if not flat.is_contiguous():
            flat = flat.contiguous()
        if self.kernel:
            y = _INT4_MM(flat, self.packed, INT4_GROUP, self.scales_and_zeros)  # (rows, out)
        else:
            y = torch.nn.functional.linear(flat, self.weight)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, int4 groups of {INT4_GROUP}"
        )


class F16Linear(nn.Module):
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.product(x if x.dim() == 2 else x.reshape(-1, self.in_features))
        return y if x.dim() == 2 else y.view(*x.shape[:-1], self.out_features)

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


def _int4_kernel_available() -> bool:
    """Whether this torch has the CPU int4 kernel, and it multiplies right."""
    try:
        k = INT4_GROUP
        q = torch.full((16, k), 9, dtype=torch.int32)  # (q - 8) = 1
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        sz = torch.zeros(1, 16, 2, dtype=torch.bfloat16)
        sz[..., 0] = 1.0
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(
            torch.ones(1, k, dtype=torch.bfloat16), packed, k, sz
        )
        return bool(torch.allclose(out.float(), torch.full((1, 16), float(k))))
    except (RuntimeError, NotImplementedError, AttributeError):
        return False


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
            packed.append(_kernel_available(device, kernel))
        layer = Int8Linear.from_weight(weight, bias, kernel).to(device)
        layer.packed = packed[0]
        return layer

    return _replace_linears(
        model,
        dtype,
        keep,
        fits=lambda w: w.shape[1] % _K_MULTIPLE == 0,
        make=make,
        near_exact=near_exact,
    )


def _f16_fits(weight: torch.Tensor) -> bool:
    """Whether float16 holds every value of ``weight`` (a larger one would saturate)."""
    return bool(weight.detach().abs().max() <= F16_MAX)


def _f16_layer(weight: torch.Tensor, bias: torch.Tensor | None, device) -> nn.Module:
    return F16Linear(weight.to(device), bias)


def _replace_linears(
    model: nn.Module, dtype: torch.dtype, keep, fits, make, near_exact=None
) -> dict[str, int]:
    """Swap every linear layer that ``fits`` (and is not named in ``keep``) for
    ``make(weight, bias, device)``, untie a tied output layer, cast the rest.

    ``near_exact``: when given, the output layer and the layers ``make`` does not take
    are made by it instead, where their weights fit float16 (``_f16_layer``); they are
    counted as kept."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    targets: list[tuple[nn.Module, str, nn.Module, object]] = []
    counts = {"quantized": 0, "kept": 0}
    for parent in model.modules():
        for name, child in parent.named_children():
            found = _linear_weight(child)
            if found is None:
                continue
            taken = not name.endswith(keep) and fits(found[0])
            if near_exact is not None and (child is output or not taken):
                if _f16_fits(found[0]):
                    targets.append((parent, name, child, near_exact))
                counts["kept"] += 1
            elif taken:
                targets.append((parent, name, child, make))
                counts["quantized"] += 1
            else:
                counts["kept"] += 1
    device = next(model.parameters()).device
    for parent, name, child, maker in targets:
        weight, bias = _linear_weight(child)  # type: ignore[misc]
        # A tied output layer shares its Parameter with the input embedding: replacing
        # the module unties them, and the embedding keeps the float weight.
        setattr(parent, name, maker(weight, bias, device))
    if output is not None and getattr(model.config, "tie_word_embeddings", False):
        # transformers must not re-tie the new module to the embedding (``tie_weights``).
        model.config.tie_word_embeddings = False
    model.to(dtype)  # floats only: quantized weights and their scales keep their dtypes
    return counts


def _kernel_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``_weight_int8pack_mm`` runs for ``dtype`` inputs on ``device``."""
    try:
        x = torch.ones(1, _K_MULTIPLE, dtype=dtype, device=device)
        q = torch.ones(_K_MULTIPLE, _K_MULTIPLE, dtype=torch.int8, device=device)
        s = torch.ones(_K_MULTIPLE, dtype=dtype, device=device)
        out = torch.ops.aten._weight_int8pack_mm(x, q, s)
        return bool(torch.allclose(out.float().cpu(), torch.full((1, _K_MULTIPLE), 16.0)))
    except (RuntimeError, NotImplementedError):
        return False


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
