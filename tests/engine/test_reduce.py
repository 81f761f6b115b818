"""The CPU reductions every decode step uses (``sample.reduce``) against torch's own."""

from __future__ import annotations

import pytest
import torch

from loomterm.engine.sample.reduce import argmax_rows, logsumexp_rows


def _rows(rows: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=g) * 8  # (rows, vocab)


@pytest.mark.parametrize("rows,vocab", [(1, 49152), (4, 49152), (3, 1000), (2, 7)])
def test_the_same_argmax_and_normaliser_as_torch(rows, vocab):
    logits = _rows(rows, vocab, seed=rows * vocab)
    logits[0, : vocab // 2] = -torch.inf  # banned tokens, as a logit bias leaves them
    assert torch.equal(argmax_rows(logits), logits.argmax(-1))
    ours = logsumexp_rows(logits)
    assert ours.shape == (rows, 1)
    torch.testing.assert_close(ours, torch.logsumexp(logits, -1, keepdim=True))


def test_ties_take_the_first_index_as_torch_does():
    logits = torch.zeros(2, 300)
    logits[0, [17, 40, 299]] = 5.0
    logits[1, [3, 4]] = 2.0
    assert argmax_rows(logits).tolist() == [17, 3] == logits.argmax(-1).tolist()


def test_a_peaked_row_keeps_its_precision():
    """One logit far above the rest: logsumexp is that logit plus a tiny log1p term."""
    logits = torch.full((1, 50_000), -30.0)
    logits[0, 123] = 60.0
    expected = torch.logsumexp(logits.double(), -1, keepdim=True).float()
    assert logsumexp_rows(logits).item() == pytest.approx(expected.item(), abs=1e-5)


def test_other_dtypes_and_a_view_go_through_torch():
    logits = _rows(2, 64, seed=3)
    half = logits.to(torch.bfloat16)
    assert torch.equal(argmax_rows(half), half.argmax(-1))
    strided = _rows(64, 2, seed=4).T  # (2, 64), not contiguous
    assert torch.equal(argmax_rows(strided), strided.argmax(-1))
