"""oneDNN's float32 products for CPU linear layers: same numbers, class-only swap."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from loomterm.engine.kernels.cpu_linear import (
    OneDnnLinear,
    onednn_available,
    stock_linears,
    use_onednn,
)
from loomterm.engine.models.load import load_model

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="no oneDNN on this CPU")


@needs_onednn
@pytest.mark.parametrize("rows", [1, 2, 3, 8, 64])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
def test_product_equals_f_linear(rows, bias, transposed):
    torch.manual_seed(rows)
    layer = nn.Linear(96, 40, bias=bias)
    if transposed:  # the decode layout (quant.decode_layout)
        layer.weight.data = layer.weight.data.t().contiguous().t()
    x = torch.randn(2, rows, 96)  # (B, T, in)
    with torch.inference_mode():
        want = F.linear(x, layer.weight, layer.bias)
        layer.__class__ = OneDnnLinear
        got = layer(x)
    assert got.shape == want.shape == (2, rows, 40)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_swap_keeps_parameters_and_ties_and_stock_puts_it_back():
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 50, bias=False))
    model[1].weight = model[0].weight  # tied, as an output layer often is
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert use_onednn(model) == 1
    assert type(model[1]) is OneDnnLinear and model[1].weight is model[0].weight
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with stock_linears(model):
        assert type(model[1]) is nn.Linear
    assert type(model[1]) is OneDnnLinear
    assert use_onednn(model) == 0  # already swapped: nothing to do


@needs_onednn
def test_autograd_falls_back_to_f_linear():
    layer = nn.Linear(8, 4)
    layer.__class__ = OneDnnLinear
    x = torch.randn(3, 8, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad is not None and layer.weight.grad is not None


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


def test_loaded_cpu_weights_take_the_decode_layout_with_their_values(tiny_llama_dir):
    """The layout is made while the tokenizer loads (``load._from_pretrained``): every
    float32 linear weight is laid out by the time ``load_model`` returns, values kept."""
    from transformers import AutoModelForCausalLM

    loaded = load_model(tiny_llama_dir, device="cpu", dtype="float32")
    stock = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir), dtype=torch.float32)
    stock_weights = dict(stock.named_parameters())
    linears = [(n, m) for n, m in loaded.model.named_modules() if isinstance(m, nn.Linear)]
    assert linears
    for name, module in linears:
        weight = module.weight
        assert weight.stride() == (1, weight.shape[0]), name
        assert torch.equal(weight, stock_weights[f"{name}.weight"]), name


def _ran_onednn(run) -> bool:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    return any(event.key == "mkldnn::_linear_pointwise" for event in prof.key_averages())


@needs_onednn
def test_one_row_of_an_unquantized_model_goes_to_f_linear(tiny_llama_dir):
    """A one-token forward of an unquantized model (a typed token's append) multiplies
    by ``F.linear``, faster than oneDNN for one row; two tokens go to oneDNN. The same
    holds for the float layers a quantized model keeps (its value projections)."""
    loaded = load_model(tiny_llama_dir, device="cpu", dtype="float32")
    layers = [m for m in loaded.model.modules() if type(m) is OneDnnLinear]
    assert layers
    with torch.inference_mode():
        assert not _ran_onednn(lambda: loaded.model(torch.tensor([[7]])))
        assert _ran_onednn(lambda: loaded.model(torch.tensor([[7, 9]])))
        one = loaded.model(torch.tensor([[7]])).logits
        with stock_linears(loaded.model):
            stock = loaded.model(torch.tensor([[7]])).logits
    torch.testing.assert_close(one, stock, rtol=1e-5, atol=1e-5)
    quantized = load_model(tiny_llama_dir, device="cpu", dtype="float32", quant="int4")
    kept = [m for m in quantized.model.modules() if type(m) is OneDnnLinear]
    assert kept  # v_proj stays float in int4
    with torch.inference_mode():
        assert not _ran_onednn(lambda: quantized.model(torch.tensor([[7]])))
        assert _ran_onednn(lambda: quantized.model(torch.tensor([[7, 9]])))
