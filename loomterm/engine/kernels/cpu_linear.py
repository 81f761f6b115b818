"""Float32 linear layers on an x86 CPU, run by oneDNN on weights in its own layout.

A decode step multiplies one row by every weight; a verification block of drafted
tokens, N siblings or a short append multiply a few rows; a prefill many. PyTorch's
own float32 product (``F.linear``) streams a weight well for one row (once it is stored
transposed, ``quant.decode_layout``) but is slow for a few rows. oneDNN's inner-product
primitive (``torch.ops.mkldnn._linear_pointwise``, the op PyTorch's own compiler emits
for CPU linear layers) is faster for blocks; on a weight in the plain layout its one-row
product streams it slowly, but on a weight reordered once into oneDNN's blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``) a block of 3 to 5 rows costs what one
row costs on ``F.linear``. SmolLM2-135M's products, one thread, weights streamed from
memory (an AMD EPYC, AVX-512), in ms:

| rows | 1 | 2 | 4 | 8 | 16 | 64 | 256 |
|---|---|---|---|---|---|---|---|
| ``F.linear``, transposed weights | 34 | 49 | 66 | 82 | 100 | 229 | 844 |
| oneDNN, plain weights | 49 | 48 | 48 | 58 | 69 | 179 | 747 |
| oneDNN, reordered weights | 41 | 47 | 32 | 42 | 57 | 177 | 629 |

Below three rows the reordered weight takes a slower path, so one or two rows are
padded to four (``PAD_ROWS``: zero rows, their outputs dropped): a decode step costs
what it did on ``F.linear`` (40.6-42.4 against 40.6-44.3 ms a step), and a drafted
block of four tokens the same as a step (40.3-41.8 against 57.8-59.5 ms). Each row's
product is the same bit for bit alone or in a block. The values are those of
``F.linear`` summed in another order (float32 noise, about 1e-6 relative).

:func:`use_onednn` switches the float32 ``nn.Linear`` layers of a loaded CPU model to
:class:`OneDnnLinear` in place and reorders their weights (a weight tied to the input
embedding, as a small model's output layer often is, gets its own reordered copy: the
embedding keeps the plain one for its lookups). It does nothing where oneDNN is
missing, off x86 (not measured there), or when ``LOOMTERM_ONEDNN=0``; the layers then
keep ``F.linear`` on the decode layout (:func:`prepare_linears` does whichever
applies). :func:`stock_linears` puts plain ``nn.Linear``
layers with dense weights back for a block.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from loomterm.config.cpu_target import X86_ANY
from loomterm.engine.kernels.quant import decode_layout

# Fewer rows than this take oneDNN's slower path on a reordered weight: padded to
# PAD_ROWS (see the module docstring).
MIN_ROWS = 3
PAD_ROWS = 4
# The batch size oneDNN is told to lay the weights out for (its blocked layout is the
# same for 4 to 16 rows on AVX-512; measured above).
REORDER_FOR = 4
_PRODUCT = torch.ops.mkldnn._linear_pointwise.default


def onednn_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """(rows, in) float32 -> (rows, out) by oneDNN, one or two rows padded to four."""
    rows = x.shape[0]
    if rows >= MIN_ROWS:
        return _PRODUCT(x, weight, bias, "none", [], "")
    padded = torch.cat([x, x.new_zeros(PAD_ROWS - rows, x.shape[1])])  # (4, in)
    return _PRODUCT(padded, weight, bias, "none", [], "")[:rows]


class OneDnnLinear(nn.Linear):
    """An ``nn.Linear`` whose weight is in oneDNN's layout and whose product runs as
    oneDNN's inner product (see the module docstring). Under autograd, or for inputs
    other than float32, it multiplies by the dense weight with ``F.linear``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != torch.float32:
            return F.linear(x, dense(self.weight), self.bias)
        y = onednn_product(x.reshape(-1, self.in_features), self.weight, self.bias)
        return y.view(*x.shape[:-1], self.out_features)


def dense(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` in the plain (out, in) layout (a reordered one is copied back)."""
    return weight.to_dense() if weight.is_mkldnn else weight


def onednn_available() -> bool:
    """Whether oneDNN's float32 inner product runs on reordered weights here and gives
    ``F.linear``'s numbers."""
    if os.environ.get("LOOMTERM_ONEDNN", "1").strip().lower() in ("0", "off", "false", "no"):
        return False
    if platform.machine().lower() not in X86_ANY or not torch.backends.mkldnn.is_available():
        return False
    try:
        with torch.inference_mode():
            x = torch.randn(3, 32)  # (3, in)
            w = torch.randn(16, 32)  # (out, in)
            b = torch.randn(16)
            packed = torch.ops.mkldnn._reorder_linear_weight(w, REORDER_FOR)
            want = F.linear(x, w, b)
            return all(
                torch.allclose(onednn_product(x[:rows], packed, b), want[:rows], atol=1e-4)
                for rows in (1, 3)
            )
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def use_onednn(model: nn.Module) -> int:
    """Make every float32 CPU ``nn.Linear`` of ``model`` an :class:`OneDnnLinear` with
    its weight reordered, in place; returns how many changed (0 where oneDNN is not
    used). A layer whose weight is shared (tied) gets a reordered copy of its own."""
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
        weight = module.weight.detach()
        # (out, in) contiguous in, oneDNN's blocked layout out: a new tensor either way,
        # so a tied weight's other users keep theirs.
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), REORDER_FOR)
        module.weight = nn.Parameter(packed, requires_grad=False)
        module.__class__ = OneDnnLinear
    return len(linears)


def prepare_linears(model: nn.Module) -> None:
    """The float32 CPU linear layers of a loaded ``model`` made ready for decoding:
    oneDNN with reordered weights where it runs (:func:`use_onednn`), else ``F.linear``
    on transposed weights (``quant.decode_layout``). Layers already made ready, and
    quantized ones, are left as they are."""
    use_onednn(model)
    decode_layout(model)  # whatever oneDNN did not take


@contextlib.contextmanager
def stock_linears(model: nn.Module) -> Iterator[None]:
    """Run ``model``'s linear layers as plain ``nn.Linear`` with dense (out, in)
    weights for the block (as ``from_pretrained`` leaves them), then switch them back."""
    swapped = [(m, m.weight) for m in model.modules() if type(m) is OneDnnLinear]
    for module, weight in swapped:
        module.__class__ = nn.Linear
        module.weight = nn.Parameter(dense(weight), requires_grad=False)
    try:
        yield
    finally:
        for module, weight in swapped:
            module.__class__ = OneDnnLinear
            module.weight = weight
