"""Integer-weight linear layers: int8 with one scale per output channel
(:class:`Int8Linear`), and int4 in groups of :data:`INT4_GROUP` inputs (:class:`Int4Linear`),
with the checks that their kernels run here. ``loomterm.engine.kernels.quant`` says why
and when a model's layers are swapped for them.
"""

from __future__ import annotations

import torch

from loomterm.engine.kernels.rows_linear import RowsLinear

INT4_GROUP = 32  # input columns per int4 scale and offset (llama.cpp Q4_1 uses 32)
# From this many rows on (a prefill), converting the int8 weight to the kernel dtype
# and running an ordinary matrix product is faster than the int8 kernel (on this CPU:
# 2x at 64 rows, even at about 20).
PREFILL_ROWS = 24
# _weight_int8pack_mm reads the input width in blocks of 16 (other widths give wrong
# numbers or crash), so narrower or odd layers stay in ``compute_dtype``.
K_MULTIPLE = 16
# The kernels, looked up once: ``torch._name`` where torch binds it (0.6 us a call
# less than ``torch.ops.aten._name``, which also resolves its overload per call).
_INT8_MM = getattr(torch, "_weight_int8pack_mm", None) or torch.ops.aten._weight_int8pack_mm
_INT4_MM = (
    getattr(torch, "_weight_int4pack_mm_for_cpu", None)
    or torch.ops.aten._weight_int4pack_mm_for_cpu
)


class Int8Linear(RowsLinear):
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


class Int4Linear(RowsLinear):
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
        kernel = weight.device.type == "cpu" and int4_kernel_available()
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


def int4_kernel_available() -> bool:
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


def int8_kernel_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``_weight_int8pack_mm`` runs for ``dtype`` inputs on ``device``."""
    try:
        x = torch.ones(1, K_MULTIPLE, dtype=dtype, device=device)
        q = torch.ones(K_MULTIPLE, K_MULTIPLE, dtype=torch.int8, device=device)
        s = torch.ones(K_MULTIPLE, dtype=dtype, device=device)
        out = torch.ops.aten._weight_int8pack_mm(x, q, s)
        return bool(torch.allclose(out.float().cpu(), torch.full((1, K_MULTIPLE), 16.0)))
    except (RuntimeError, NotImplementedError):
        return False
