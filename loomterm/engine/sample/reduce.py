"""The greedy argmax of (B, V) logits, which every greedy decode step pays for.

On the GPU it is torch's own. On the CPU torch's ``argmax`` over one row of ~50,000
logits is not vectorised: about 40 microseconds on one thread warm, 100 right after a
llama.cpp decode step has swept the caches. numpy's is vectorised and gives the same
index (the first of equal maxima).
"""

from __future__ import annotations

import torch


def argmax_rows(values: torch.Tensor) -> torch.Tensor:
    """The first index of each row's largest value, as ``values.argmax(-1)``.
    values: (B, V) -> (B,) int64."""
    on_cpu = values.device.type == "cpu" and values.dtype == torch.float32
    if not on_cpu or values.requires_grad:
        return values.argmax(-1)
    return torch.from_numpy(values.contiguous().numpy().argmax(-1)).to(torch.long)
