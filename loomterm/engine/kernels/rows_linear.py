"""The shape every quantized linear layer shares: ``forward`` flattens the input to
rows, runs the layer's ``product`` and gives back the input's shape and dtype.
"""

from __future__ import annotations

import torch
from torch import nn


class RowsLinear(nn.Module):
    """A linear layer whose ``product`` maps (rows, in) to (rows, out), perhaps in a
    dtype of its own kernel; ``forward`` takes any leading shape and casts back."""

    in_features: int
    out_features: int

    def product(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        y = self.product(x if x.dim() == 2 else x.reshape(-1, self.in_features))
        if x.dim() != 2:
            y = y.view(*x.shape[:-1], self.out_features)
        return y if y.dtype == dtype else y.to(dtype)
