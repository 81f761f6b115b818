"""Row reductions over a vocabulary that every decode step pays for: the argmax and
the log-normaliser of (B, V) logits.

On the GPU these are torch's own. On the CPU torch's ``argmax`` and ``logsumexp`` over
one row of ~50,000 logits are not vectorised: about 40 and 60 microseconds on one
thread warm, 100 and 220 right after a llama.cpp decode step has swept the caches, a
few percent of a small model's step. The CPU paths give the same indices and
log-normalisers within float32 rounding, in fewer and vectorised passes: numpy's
argmax, and ``log_softmax`` (one fused pass) between two maxima.

(A blocked top-k, the ``k`` blocks with the largest maxima and then only their values,
is twice as fast as torch's ``topk`` warm and slower cold: its seven small operations
cost more to dispatch than the one it replaces. Each torch call costs 20-40
microseconds after a decode step, whatever it computes.)
"""

from __future__ import annotations

import torch


def _on_cpu(values: torch.Tensor) -> bool:
    return values.device.type == "cpu" and values.dtype == torch.float32


def argmax_rows(values: torch.Tensor) -> torch.Tensor:
    """The first index of each row's largest value, as ``values.argmax(-1)``.
    values: (B, V) -> (B,) int64."""
    if not _on_cpu(values) or values.requires_grad:
        return values.argmax(-1)
    return torch.from_numpy(values.detach().contiguous().numpy().argmax(-1)).to(torch.long)


def logsumexp_rows(values: torch.Tensor) -> torch.Tensor:
    """Each row's ``logsumexp``, kept as a column. values: (B, V) -> (B, 1)."""
    if not _on_cpu(values):
        return torch.logsumexp(values, dim=-1, keepdim=True)
    # (B, 1): any entry's logit minus its log-softmax; the row's largest (where the
    # log-softmax is largest too) avoids the rounding of a tiny probability's log.
    # One fused pass and two vectorised maxima instead of logsumexp's slower passes.
    best = values.amax(-1, keepdim=True)  # (B, 1)
    return best - torch.log_softmax(values, -1).amax(-1, keepdim=True)
