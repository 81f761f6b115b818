"""Float32 linear layers on an x86 CPU, run by oneDNN.

PyTorch's own float32 product (``F.linear``) handles one row well once the weight is
stored transposed (``quant.decode_layout``), but a block of a few rows -- a verification
block of drafted tokens, a short append, a prefill -- goes to a general matrix product
that is slow for small row counts: on SmolLM2-135M (one thread, AVX-512) a forward of
2 tokens costs 1.51x one token, 8 tokens 1.98x, 256 tokens 24x. oneDNN's inner-product
primitive (``torch.ops.mkldnn._linear_pointwise``, the op PyTorch's own compiler emits
for CPU linear layers) reads the same transposed weight and costs 1.10x, 1.28x and 13.6x;
one row costs what ``F.linear`` does with the weights in the cache -- but a real decode
step streams them from memory, and there oneDNN's one-row product costs about 1.4x
``F.linear``'s (an AMD EPYC, one thread), while from two rows on it is the faster one.
So one row goes to ``F.linear`` (in the decode step, ``kernels.step``, and in these
layers' forward: a one-token append), everything else here. That holds for the float
layers a quantized model keeps too (its value projections): oneDNN's one-row product
for their narrow (192 x 576) weights cost an int8 step about a tenth of its time. The
values are the same products summed in another order (float32 noise, about 1e-6
relative).

:func:`use_onednn` switches the float32 ``nn.Linear`` layers of a loaded CPU model to
:class:`OneDnnLinear` in place (the class only: parameters, ties and state dicts stay
as they are). It does nothing where oneDNN is missing, off x86 (not measured there), or
when ``LOOMTERM_ONEDNN=0``; :func:`stock_linears` puts the plain class back for a block
(the bench's transformers baselines).
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from loomterm.cpu_target import X86_ANY


class OneDnnLinear(nn.Linear):
    """An ``nn.Linear`` whose product runs as oneDNN's inner product (see the module
    docstring). Under autograd it falls back to ``F.linear``, and so does one row."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != torch.float32:
            return F.linear(x, self.weight, self.bias)
        if x.numel() == x.shape[-1]:  # one row, whatever the leading dims
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")


def onednn_available() -> bool:
    """Whether oneDNN's float32 inner product is there and gives ``F.linear``'s numbers."""
    if os.environ.get("LOOMTERM_ONEDNN", "1").strip().lower() in ("0", "off", "false", "no"):
        return False
    if platform.machine().lower() not in X86_ANY or not torch.backends.mkldnn.is_available():
        return False
    try:
        with torch.inference_mode():
            x = torch.randn(3, 32)  # (3, in)
            w = torch.randn(16, 32)  # (out, in)
            b = torch.randn(16)
            got = torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
            return bool(torch.allclose(got, F.linear(x, w, b), atol=1e-4, rtol=1e-4))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def use_onednn(model: nn.Module) -> int:
    """Make every float32 CPU ``nn.Linear`` of ``model`` an :class:`OneDnnLinear`, in
    place; returns how many changed (0 where oneDNN is not used). A single row still
    goes to ``F.linear`` (faster there, see the module docstring), as in the decode
    step, so that the step and the generic forward multiply a row alike."""
    linears = [
        m
        for m in model.modules()
        if type(m) is nn.Linear
        and m.weight.dtype == torch.float32
        and m.weight.device.type == "cpu"
    ]
    if not linears or not onednn_available():
        return 0
    for module in linears:
        module.__class__ = OneDnnLinear
    return len(linears)


@contextlib.contextmanager
def stock_linears(model: nn.Module) -> Iterator[None]:
    """Run ``model``'s linear layers as plain ``nn.Linear`` for the block (as
    ``from_pretrained`` leaves them), then switch them back."""
    swapped = [m for m in model.modules() if type(m) is OneDnnLinear]
    for module in swapped:
        module.__class__ = nn.Linear
    try:
        yield
    finally:
        for module in swapped:
            module.__class__ = OneDnnLinear
