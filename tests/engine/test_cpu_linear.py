"""oneDNN's float32 products for CPU linear layers: same numbers, class-only swap."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from loomterm.engine.kernels.cpu_linear import (
    OneDnnLinear,
    dense,
    onednn_available,
    stock_linears,
    use_onednn,
)
from loomterm.engine.models.load import load_model

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="no oneDNN on this CPU")


@needs_onednn
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 64])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
def test_product_equals_f_linear(rows, bias, transposed):
    """On the weight reordered into oneDNN's layout (from the plain or the decode
    layout), one or two rows padded to four: ``F.linear``'s numbers, each row the same
    bit for bit alone and in the block."""
    torch.manual_seed(rows)
    layer = nn.Linear(96, 40, bias=bias)
    if transposed:  # the decode layout (quant.decode_layout)
        layer.weight.data = layer.weight.data.t().contiguous().t()
    x = torch.randn(2, rows, 96)  # (B, T, in)
    want = F.linear(x, layer.weight, layer.bias)
    model = nn.Sequential(layer)
    assert use_onednn(model) == 1 and model[0].weight.is_mkldnn
    with torch.inference_mode():
        got = model[0](x)
        alone = torch.stack([model[0](x[:, i : i + 1])[:, 0] for i in range(rows)], 1)
    assert got.shape == want.shape == (2, rows, 40)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(alone, got)


@needs_onednn
def test_a_tied_weight_gets_its_own_reordered_copy_and_stock_puts_plain_layers_back():
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 50, bias=False))
    model[1].weight = model[0].weight  # tied, as an output layer often is
    plain = model[0].weight.detach().clone()
    assert use_onednn(model) == 1
    assert type(model[1]) is OneDnnLinear and model[1].weight.is_mkldnn
    assert model[0].weight is not model[1].weight and not model[0].weight.is_mkldnn
    assert torch.equal(model[0].weight, plain)  # the embedding's lookups: plain rows
    assert torch.equal(dense(model[1].weight), plain)
    x = torch.randn(3, 16)
    with torch.inference_mode():
        ours = model[1](x)
        with stock_linears(model):
            assert type(model[1]) is nn.Linear and not model[1].weight.is_mkldnn
            stock = model[1](x)
    torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)
    assert type(model[1]) is OneDnnLinear and model[1].weight.is_mkldnn
    assert use_onednn(model) == 0  # already swapped: nothing to do


@needs_onednn
def test_autograd_falls_back_to_f_linear():
    layer = nn.Linear(8, 4)
    layer.__class__ = OneDnnLinear  # the class alone: a plain weight that takes grads
    x = torch.randn(3, 8, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad is not None and layer.weight.grad is not None
    model = nn.Sequential(nn.Linear(8, 4))
    use_onednn(model)  # reordered: the product runs on a dense copy
    x = torch.randn(3, 8, requires_grad=True)
    model(x).sum().backward()
    assert x.grad is not None


def test_switch_off_by_environment(monkeypatch):
    monkeypatch.setenv("LOOMTERM_ONEDNN", "0")
    assert not onednn_available()
    model = nn.Sequential(nn.Linear(8, 8))
    assert use_onednn(model) == 0 and type(model[0]) is nn.Linear


@needs_onednn
def test_loaded_cpu_model_uses_it_and_matches_the_stock_forward(tiny_llama_dir):
    loaded = load_model(tiny_llama_dir, device="cpu", dtype="float32")
    swapped = [m for m in loaded.model.modules() if type(m) is OneDnnLinear]
    assert swapped, "float32 CPU linears run on oneDNN"
    ids = torch.randint(0, 300, (1, 17))
    with torch.inference_mode():
        ours = loaded.model(ids).logits
        with stock_linears(loaded.model):
            stock = loaded.model(ids).logits
    torch.testing.assert_close(ours, stock, rtol=1e-4, atol=1e-4)
    bf16 = load_model(tiny_llama_dir, device="cpu", dtype="bfloat16")
    assert not any(type(m) is OneDnnLinear for m in bf16.model.modules())  # float32 only


def test_loaded_cpu_weights_are_laid_out_for_decoding_with_their_values(
    tiny_llama_dir, monkeypatch
):
    """The layout is made while the tokenizer loads (``load._from_pretrained``): every
    float32 linear weight is in oneDNN's layout where oneDNN runs, else transposed for
    ``F.linear`` (``LOOMTERM_ONEDNN=0``), by the time ``load_model`` returns, values kept."""
    from transformers import AutoModelForCausalLM

    stock = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir), dtype=torch.float32)
    stock_weights = dict(stock.named_parameters())
    for onednn in ("1", "0"):
        monkeypatch.setenv("LOOMTERM_ONEDNN", onednn)
        loaded = load_model(tiny_llama_dir, device="cpu", dtype="float32")
        linears = [(n, m) for n, m in loaded.model.named_modules() if isinstance(m, nn.Linear)]
        assert linears
        for name, module in linears:
            weight = module.weight
            if onednn == "1" and onednn_available():
                assert type(module) is OneDnnLinear and weight.is_mkldnn, name
            else:
                assert type(module) is nn.Linear and weight.stride() == (1, weight.shape[0])
            assert torch.equal(dense(weight), stock_weights[f"{name}.weight"]), name


def _ran_onednn(run) -> bool:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    return any(event.key == "mkldnn::_linear_pointwise" for event in prof.key_averages())


@needs_onednn
def test_a_one_token_forward_runs_on_onednn_and_matches_the_stock_one(tiny_llama_dir):
    """A one-token forward (a typed token's append) multiplies on oneDNN, its row padded
    to four, and gives the stock forward's logits; so do a quantized model's float
    layers (its value projections)."""
    loaded = load_model(tiny_llama_dir, device="cpu", dtype="float32")
    with torch.inference_mode():
        assert _ran_onednn(lambda: loaded.model(torch.tensor([[7]])))
        one = loaded.model(torch.tensor([[7]])).logits
        with stock_linears(loaded.model):
            stock = loaded.model(torch.tensor([[7]])).logits
    torch.testing.assert_close(one, stock, rtol=1e-5, atol=1e-5)
    quantized = load_model(tiny_llama_dir, device="cpu", dtype="float32", quant="int4")
    kept = [m for m in quantized.model.modules() if type(m) is OneDnnLinear]
    assert kept and all(m.weight.is_mkldnn for m in kept)  # v_proj stays float in int4
    with torch.inference_mode():
        assert _ran_onednn(lambda: quantized.model(torch.tensor([[7]])))
