"""The CPU argmax greedy steps use (``sample.reduce``), and the CPU token records,
against torch's own."""

from __future__ import annotations

import pytest
import torch

from loomterm.engine.sample.chain import token_record_tensor
from loomterm.engine.sample.reduce import argmax_rows

FLOAT32 = {"rtol": 1e-5, "atol": 1e-5}  # float32 rounding, against float64


def _rows(rows: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=g) * 8  # (rows, vocab)


@pytest.mark.parametrize("rows,vocab", [(1, 49152), (4, 49152), (3, 1000), (2, 7)])
def test_the_same_argmax_and_normaliser_as_torch(rows, vocab):
    logits = _rows(rows, vocab, seed=rows * vocab)
    logits[0, : vocab // 2] = -torch.inf  # banned tokens, as a logit bias leaves them
    chosen = argmax_rows(logits)
    assert torch.equal(chosen, logits.argmax(-1))
    records = token_record_tensor(logits, chosen, k=5)  # (rows, 12)
    lse = torch.logsumexp(logits.double(), -1, keepdim=True)  # (rows, 1)
    top, ids = logits.double().topk(min(5, vocab), -1)
    assert records[:, 0].tolist() == chosen.tolist()
    torch.testing.assert_close(
        records[:, 1:2].double(), logits.double().gather(1, chosen[:, None]) - lse, **FLOAT32
    )
    assert records[:, 2 : 2 + ids.shape[1]].long().tolist() == ids.tolist()
    torch.testing.assert_close(records[:, 2 + ids.shape[1] :].double(), top - lse, **FLOAT32)


def test_ties_take_the_first_index_as_torch_does():
    logits = torch.zeros(2, 300)
    logits[0, [17, 40, 299]] = 5.0
    logits[1, [3, 4]] = 2.0
    assert argmax_rows(logits).tolist() == [17, 3] == logits.argmax(-1).tolist()


def test_a_peaked_row_keeps_its_precision():
    """One logit far above the rest: its log-probability is a tiny negative number, and
    the others' are about -90."""
    logits = torch.full((1, 50_000), -30.0)
    logits[0, 123] = 60.0
    records = token_record_tensor(logits, argmax_rows(logits), k=2)[0].tolist()
    assert records[0] == 123 and records[2] == 123
    assert records[1] == pytest.approx(-49_999 * torch.tensor(-90.0).exp().item(), abs=1e-7)
    assert records[5] == pytest.approx(-90.0, abs=1e-4)


def test_other_dtypes_and_a_view_go_through_torch():
    logits = _rows(2, 64, seed=3)
    half = logits.to(torch.bfloat16)
    assert torch.equal(argmax_rows(half), half.argmax(-1))
    strided = _rows(64, 2, seed=4).T  # (2, 64), not contiguous
    assert torch.equal(argmax_rows(strided), strided.argmax(-1))
