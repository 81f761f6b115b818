"""Precision modes: float16, int8 and int4 weights and bfloat16, against float32 and against a recompute
in the same precision.

Tolerance in a reduced precision. The int8 kernel's output, and every product in a
bfloat16 model, is rounded to bfloat16: 8 significant bits, a step of 2^-8 (0.4%) of
the value. A decode step and a full recompute run different kernels (one query
against a batch of them, loomterm's attention against SDPA), so the same logit may
come out a few such steps apart. ``LOW_TOL`` (2% of the largest logit, five steps)
covers that and still fails on any real mistake (wrong KV, wrong position), which
moves logits by tens of percent on these peaked tiny models.
"""

from __future__ import annotations

import pytest
import torch

from loomterm.config.settings import EngineOptions
from loomterm.engine import Loom
from loomterm.engine.kernels.cpu_linear import dense
from loomterm.engine.kernels.quant import (
    F16_MAX,
    INT4_GROUP,
    PREFILL_ROWS,
    F16Linear,
    Int4Linear,
    Int8Linear,
    fbgemm_available,
    fbgemm_rows_agree,
    normalise_quant,
    quantize_f16,
    quantize_int4,
    quantize_int8,
)
from loomterm.engine.models.load import load_model
from loomterm.errors import ModelLoadError
from tests.helpers import assert_matches_recompute, reference_logits

LOW_TOL = 2e-2
PROMPT = "The quick brown fox jumps over the lazy dog."
TEXT = "Once upon a time, in a land far away, there lived a weaver who wove stories."


def _folder(family, tiny_llama_dir, tiny_gpt2_dir):
    return tiny_llama_dir if family == "llama" else tiny_gpt2_dir


@pytest.fixture(
    params=[
        ("f16", "float32"),
        ("int8", "float32"),
        ("int8", "bfloat16"),
        ("int4", "float32"),
        ("none", "bfloat16"),
    ]
)
def precision(request):
    return request.param


@pytest.fixture
def low_loom(family, precision, tiny_llama_dir, tiny_gpt2_dir):
    """A loom on a tiny model in a reduced precision."""
    quant, dtype = precision
    folder = _folder(family, tiny_llama_dir, tiny_gpt2_dir)
    return Loom.from_loaded(load_model(str(folder), device="cpu", dtype=dtype, quant=quant))


# -- the layer ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_int8_linear_is_the_dequantized_product(dtype):
    torch.manual_seed(0)
    weight, bias = torch.randn(40, 64), torch.randn(40)
    layer = Int8Linear.from_weight(weight, bias, torch.bfloat16)
    assert layer.weight.dtype is torch.int8 and layer.weight.shape == (40, 64)
    # Per output channel: each row's largest weight maps to +-127.
    assert layer.weight.abs().amax(1).eq(127).all()
    deq = layer.weight.float() * layer.scales.float()[:, None]
    # Half a step of rounding, plus the scale's own rounding to bfloat16 (2^-8).
    bound = layer.scales.float()[:, None] / 2 + weight.abs() * 2**-8
    assert ((deq - weight).abs() <= bound).all()
    x = torch.randn(3, 5, 64, dtype=dtype)
    y = layer(x)
    assert y.shape == (3, 5, 40) and y.dtype is dtype
    want = x.float().to(torch.bfloat16).float() @ deq.T + bias.to(torch.bfloat16).float()
    assert torch.allclose(y.float(), want, rtol=2e-2, atol=2e-2)
    long = torch.randn(2, PREFILL_ROWS, 64, dtype=dtype)  # a prefill: no int8 kernel
    want = long.float().to(torch.bfloat16).float() @ deq.T + bias.to(torch.bfloat16).float()
    assert torch.allclose(layer(long).float(), want, rtol=2e-2, atol=5e-2)
    layer.packed = False  # the per-call fallback gives the same numbers
    assert torch.allclose(layer(x).float(), y.float(), rtol=2e-2, atol=5e-2)


def test_scales_keep_the_kernel_dtype_when_the_model_is_cast():
    layer = Int8Linear.from_weight(torch.randn(16, 32), torch.randn(16), torch.bfloat16)
    layer.to(torch.float32)
    assert layer.scales.dtype is torch.bfloat16 and layer.bias.dtype is torch.bfloat16
    assert layer.weight.dtype is torch.int8


@pytest.mark.parametrize("fbgemm", [True, False])
def test_quantize_replaces_linears_and_keeps_narrow_and_value_layers(fbgemm, monkeypatch):
    """Narrow layers and value projections are kept out of int8: in float16 where
    fbgemm runs (float32 activations on an x86 CPU), as they were elsewhere."""
    if fbgemm and not fbgemm_available():
        pytest.skip("fbgemm's float16 product is not in this torch (x86 only)")
    monkeypatch.setattr("loomterm.engine.kernels.quant.fbgemm_available", lambda: fbgemm)
    model = torch.nn.Sequential()
    model.add_module("wide", torch.nn.Linear(32, 8))
    model.add_module("odd", torch.nn.Linear(24, 8))  # 24 is not a multiple of 16
    model.add_module("v_proj", torch.nn.Linear(32, 8))
    model.add_module("huge", torch.nn.Linear(24, 8))
    with torch.no_grad():
        model.huge.weight[0, 0] = 2 * F16_MAX  # would saturate in float16
    model.config = type("C", (), {"tie_word_embeddings": False})()
    counts = quantize_int8(model, torch.float32)
    assert counts == {"quantized": 1, "kept": 3}
    assert isinstance(model.wide, Int8Linear)
    kept = F16Linear if fbgemm else torch.nn.Linear
    assert type(model.odd) is kept and type(model.v_proj) is kept
    assert type(model.huge) is torch.nn.Linear


def test_int8_output_layer_is_float16_where_fbgemm_runs(tiny_llama_dir):
    """On an x86 CPU the output layer of an int8 model takes float16 weights (about
    twice as fast as the int8 kernel there); its logits equal a float16 copy's."""
    if not fbgemm_available():
        pytest.skip("fbgemm's float16 product is not in this torch (x86 only)")
    exact = load_model(str(tiny_llama_dir), device="cpu", dtype="float32")
    loaded = load_model(str(tiny_llama_dir), device="cpu", quant="int8")
    head = loaded.model.get_output_embeddings()
    assert isinstance(head, F16Linear)
    want = dense(exact.model.get_output_embeddings().weight).half().float()
    assert torch.equal(head.weight, want)


def test_quant_names():
    assert normalise_quant(None) == normalise_quant("off") == "none"
    assert normalise_quant("INT8") == "int8" and normalise_quant("int4") == "int4"
    assert normalise_quant("fp16") == normalise_quant("float16") == normalise_quant("F16") == "f16"
    with pytest.raises(ValueError, match="use none, f16, int8 or int4"):
        normalise_quant("int3")


@pytest.mark.parametrize("fbgemm", [True, False])
def test_f16_linear_is_the_product_of_float16_weights(fbgemm, monkeypatch):
    """Float16 weights, float32 products: the layer equals ``F.linear`` with the weight
    rounded to float16 (to float32 noise), through fbgemm and through the plain product
    a device without it takes; through fbgemm, a row's product is the same alone and
    in a block: bit for bit where its kernels agree (AVX-512: decoding one token at a
    time equals a recompute), else to float32 noise (AVX2, ``fbgemm_rows_agree``)."""
    if fbgemm and not fbgemm_available():
        pytest.skip("fbgemm's float16 product is not in this torch (x86 only)")
    monkeypatch.setattr("loomterm.engine.kernels.quant.fbgemm_available", lambda: fbgemm)
    torch.manual_seed(0)
    weight, bias = torch.randn(40, 72), torch.randn(40)
    layer = F16Linear(weight, bias)
    assert (layer.packed is not None) is fbgemm
    assert torch.equal(layer.weight, weight.half().float())
    for rows in (1, 5, 64):  # decode, a drafted block, a prefill chunk
        x = torch.randn(2, rows, 72)
        y = layer(x)
        assert y.shape == (2, rows, 40) and y.dtype is torch.float32
        want = torch.nn.functional.linear(x, weight.half().float(), bias)
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    block = torch.randn(24, 72)
    alone = torch.cat([layer.product(block[i : i + 1]) for i in range(24)])
    together = layer.product(block)
    if fbgemm and fbgemm_rows_agree():
        assert torch.equal(alone, together)
    torch.testing.assert_close(alone, together, rtol=1e-6, atol=1e-5)
    layer.to(torch.bfloat16)  # a model cast leaves the float16 weight as it is
    assert torch.equal(layer.weight, weight.half().float())
    assert layer(block.bfloat16()).dtype is torch.bfloat16


def test_quantize_f16_keeps_only_weights_beyond_float16():
    model = torch.nn.Sequential()
    model.add_module("wide", torch.nn.Linear(24, 8))  # any width
    model.add_module("v_proj", torch.nn.Linear(32, 8))  # value projections too
    model.add_module("huge", torch.nn.Linear(32, 8))
    with torch.no_grad():
        model.huge.weight[0, 0] = 2 * F16_MAX  # would saturate in float16
    model.config = type("C", (), {"tie_word_embeddings": False})()
    assert quantize_f16(model, torch.float32) == {"quantized": 2, "kept": 1}
    assert isinstance(model.wide, F16Linear) and isinstance(model.v_proj, F16Linear)
    assert type(model.huge) is torch.nn.Linear


@pytest.mark.parametrize("kernel", [True, False])
def test_int4_linear_is_the_dequantized_product(kernel):
    """Groups of 32 inputs, 16 levels from the group's minimum to its maximum: every
    weight within half a step (plus bfloat16 rounding of scale and offset), and the
    layer's product equals the product with the dequantized weight, with the CPU
    kernel and with the per-call fallback alike."""
    torch.manual_seed(0)
    weight, bias = torch.randn(48, 96), torch.randn(48)
    layer = Int4Linear.from_weight(weight, bias)
    if not kernel:  # the layout a device without the kernel keeps
        g = INT4_GROUP
        w = weight.view(48, 96 // g, g)
        low = w.amin(-1, keepdim=True)
        scale = ((w.amax(-1, keepdim=True) - low) / 15).clamp(min=1e-8)
        q = torch.round((w - low) / scale).clamp(0, 15).to(torch.uint8).view(48, 96)
        layer = Int4Linear(q, layer.scales_and_zeros, layer.bias, (48, 96), kernel=False)
    assert layer.kernel is kernel
    deq = layer.weight.float()  # (out, in)
    assert deq.shape == (48, 96)
    step = weight.view(48, 3, 32)
    step = (step.amax(-1) - step.amin(-1)) / 15  # (out, groups)
    bound = step.repeat_interleave(32, 1) / 2 + weight.abs() * 2**-7 + 1e-2
    assert ((deq - weight).abs() <= bound).all()
    for rows in (1, 5, 64):  # decode, a drafted block, a prefill chunk
        x = torch.randn(2, rows, 96)
        y = layer(x)
        assert y.shape == (2, rows, 48) and y.dtype is torch.float32
        want = x.to(torch.bfloat16).float() @ deq.T + bias.to(torch.bfloat16).float()
        assert torch.allclose(y, want, rtol=2e-2, atol=6e-2)
    layer.to(torch.float32)  # a model cast leaves the packed weight and its scales be
    assert layer.scales_and_zeros.dtype is torch.bfloat16
    assert torch.allclose(layer(x), y)


def test_quantize_int4_keeps_layers_the_kernel_cannot_take():
    model = torch.nn.Sequential()
    model.add_module("wide", torch.nn.Linear(64, 16))
    model.add_module("narrow", torch.nn.Linear(48, 16))  # 48 is not a multiple of 32
    model.add_module("v_proj", torch.nn.Linear(64, 16))
    model.config = type("C", (), {"tie_word_embeddings": False})()
    assert quantize_int4(model, torch.float32) == {"quantized": 1, "kept": 2}
    assert isinstance(model.wide, Int4Linear) and type(model.narrow) is torch.nn.Linear


# -- loading ----------------------------------------------------------------------------------
def test_load_int8_records_its_precision(family, tiny_llama_dir, tiny_gpt2_dir):
    folder = _folder(family, tiny_llama_dir, tiny_gpt2_dir)
    exact = load_model(str(folder), device="cpu", dtype="float32")
    loaded = load_model(str(folder), device="cpu", quant="int8")
    assert loaded.quant == "int8" and loaded.dtype is torch.float32
    assert loaded.precision == "int8 (float32)" and exact.precision == "float32"
    assert loaded.identity()["quant"] == "int8" and "quant" not in exact.identity()
    # Same weights file, same fingerprint: a session opens in either precision.
    assert loaded.fingerprint == exact.fingerprint
    head = loaded.model.get_output_embeddings()
    assert isinstance(head, F16Linear if fbgemm_available() else Int8Linear)
    # A tied head (GPT-2) gets its own copy; the embedding keeps float weights.
    embedding = loaded.model.get_input_embeddings().weight
    assert embedding.dtype is torch.float32
    assert torch.equal(embedding, exact.model.get_input_embeddings().weight)
    quantized = [m for m in loaded.model.modules() if isinstance(m, Int8Linear)]
    assert len(quantized) >= 4


def test_unknown_quant_is_a_one_line_load_error(tiny_llama_dir):
    with pytest.raises(ModelLoadError, match="unknown quantization 'int3'"):
        load_model(str(tiny_llama_dir), device="cpu", quant="int3")


def test_engine_option_and_loom_load(tiny_llama_dir):
    options = EngineOptions(model=str(tiny_llama_dir), device="cpu", quant="int8", threads=1)
    assert options.model_kwargs()["quant"] == "int8"
    loom = Loom.load(**options.load_kwargs())
    assert loom.runner.loaded.quant == "int8"
    # What the status bar shows: the device, the backend and its threads, the precision.
    assert loom.runner.where == "cpu · torch (1 thread) · int8 (float32)"
    assert loom.runner.precision == "int8 (float32)"
    assert loom.runner.identity()["quant"] == "int8"
    with pytest.raises(Exception, match="quant"):
        EngineOptions(quant="int3")


def test_int8_is_close_to_float32(family, tiny_llama_dir, tiny_gpt2_dir):
    """Next-token distributions of int8 against float32 on the tiny models: KL well
    under the default model's bound (the bench and the default-model test below)."""
    folder = _folder(family, tiny_llama_dir, tiny_gpt2_dir)
    exact = load_model(str(folder), device="cpu", dtype="float32")
    ids = torch.tensor([exact.tokenizer(TEXT + " " + PROMPT)["input_ids"]])
    with torch.inference_mode():
        want = exact.model(ids).logits[0].log_softmax(-1)
        for dtype in ("float32", "bfloat16"):
            quant = load_model(str(folder), device="cpu", dtype=dtype, quant="int8")
            got = quant.model(ids).logits[0].float().log_softmax(-1)
            kl = (want.exp() * (want - got)).sum(-1)
            assert float(kl.mean()) < 1e-3 and float(kl.max()) < 5e-3
            assert (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.9


# -- operations equal a recompute in the same precision -------------------------------------------
def test_operations_equal_a_recompute_in_the_same_precision(low_loom):
    loom = low_loom
    node = loom.append(loom.root, PROMPT)
    assert_matches_recompute(loom, node, LOW_TOL)
    (kid,) = loom.generate(node, 12, temperature=0)
    assert_matches_recompute(loom, kid, LOW_TOL)
    kids = loom.generate(node, 8, n=3, temperature=1.0, seed=2)
    for child in kids:
        assert_matches_recompute(loom, child, LOW_TOL)
    cut = loom.truncate(kid, node.end + 4)
    assert_matches_recompute(loom, cut, LOW_TOL)
    spliced = loom.splice(kid, 2, 4, " red", exact=True)
    assert_matches_recompute(loom, spliced, LOW_TOL)
    at = node.end + 2
    holder, offset = loom.tree.locate(kid, at)
    alternative = next(t for t, _ in holder.top[offset] if t != loom.tokens(kid)[at])
    picked = loom.pick(kid, at, alternative)
    assert_matches_recompute(loom, picked, LOW_TOL)
    if loom.capabilities.rerope:
        fast = loom.splice(kid, 2, 3, " blue", exact=False)
        loom.refresh(fast)
        assert_matches_recompute(loom, fast, LOW_TOL)


def test_recorded_logprobs_match_a_recompute_in_the_same_precision(low_loom):
    loom = low_loom
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 6, temperature=1.0, seed=3)
    path = loom.tokens(node)
    for i, token in enumerate(kid.tokens):
        logprobs = reference_logits(loom, path + kid.tokens[:i]).log_softmax(-1)
        assert kid.logprobs[i] == pytest.approx(float(logprobs[token]), abs=0.1)


# -- sessions ---------------------------------------------------------------------------------
def test_an_int8_session_reopens_in_float32_and_its_snapshot_is_not_reused(
    tiny_llama_dir, tmp_path
):
    """Precision is recorded but token ids do not depend on it: a session made in int8
    opens in float32 (and back); its KV snapshot, which does depend on it, is refused."""
    from loomterm.sessions.session import Session

    folder = str(tiny_llama_dir)
    loom = Loom.load(folder, device="cpu", quant="int8")
    node = loom.append(loom.root, TEXT)
    loom.generate(node, 6, temperature=0)
    loom.cursor = node.children[0]
    path = tmp_path / "int8.loom"
    session = Session.create(loom, path, kv_snapshot=True)
    assert session.loom.runner.identity()["quant"] == "int8"
    session.close()
    with pytest.warns(UserWarning, match="quant int8, not none"):
        reopened = Session.open(path, device="cpu", dtype="float32")
    try:
        assert reopened.loom.runner.loaded.quant == "none"
        assert reopened.loom.tokens(reopened.loom.cursor) == loom.tokens(loom.cursor)
        assert_matches_recompute(reopened.loom, reopened.loom.cursor)
    finally:
        reopened.close()
    again = Session.open(path, device="cpu", quant="int8")
    try:
        assert again.loom.runner.loaded.quant == "int8"
    finally:
        again.close()


# -- the real default model ----------------------------------------------------------------------
def _default_model_against_float32(quant: str, head: type) -> tuple[torch.Tensor, float]:
    """(KL per position, top-1 agreement) of the default model in ``quant`` against
    float32 over the first 256 tokens of the bench corpus; its output layer is a
    ``head``."""
    from loomterm.bench import corpus_text

    exact = load_model(None, device="cpu", dtype="float32")
    ids = exact.tokenizer(corpus_text(), add_special_tokens=False)["input_ids"][:256]
    with torch.inference_mode():
        want = exact.model(torch.tensor([ids])).logits[0].log_softmax(-1)
        del exact
        low = load_model(None, device="cpu", quant=quant)
        assert isinstance(low.model.get_output_embeddings(), head)
        got = low.model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    kl = (want.exp() * (want - got)).sum(-1)
    return kl, float((got.argmax(-1) == want.argmax(-1)).float().mean())


@pytest.mark.default_model
def test_default_model_int8_kl_to_float32():
    """The bench's fidelity figure, on part of the bench corpus: KL mean <= 0.005 nats."""
    head = F16Linear if fbgemm_available() else Int8Linear
    kl, agree = _default_model_against_float32("int8", head)
    assert float(kl.mean()) <= 0.005 and agree >= 0.9


@pytest.mark.default_model
def test_default_model_f16_kl_to_float32():
    """Float16 weights barely move the model: KL mean under 1e-4 nats (measured: about
    2e-6) and the same top-1 token almost everywhere."""
    kl, agree = _default_model_against_float32("f16", F16Linear)
    assert float(kl.mean()) <= 1e-4 and agree >= 0.98


@pytest.mark.default_model
def test_default_model_int4_kl_to_float32():
    """int4 (groups of 32, as Q4_1) costs more fidelity than int8 but stays a usable
    model: measured KL mean 0.054 nats and 83% top-1 agreement over these 256 tokens;
    the bound leaves room for another CPU's rounding and fails on a broken layout
    (a wrong group order or offset gives KL of several nats)."""
    kl, agree = _default_model_against_float32("int4", Int4Linear)
    assert float(kl.mean()) <= 0.1 and agree >= 0.75


# -- the float32 weight layout for decoding ------------------------------------------------------
def test_float32_weights_are_laid_out_for_one_row_products(tiny_llama_dir, monkeypatch):
    """Without oneDNN (off x86, or ``LOOMTERM_ONEDNN=0``) float32 weights are stored
    transposed for ``F.linear``'s one-row product, same values, same logits; bfloat16
    keeps the (out, in) layout."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("LOOMTERM_ONEDNN", "0")
    loaded = load_model(str(tiny_llama_dir), device="cpu", dtype="float32")
    stock = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir), dtype=torch.float32)
    linears = [m for m in loaded.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.t().is_contiguous() for m in linears)
    for (name, mine), (_, theirs) in zip(
        loaded.model.named_parameters(), stock.named_parameters(), strict=True
    ):
        assert torch.equal(mine, theirs), name  # the same values, another layout
    ids = torch.tensor([loaded.tokenizer(TEXT)["input_ids"]])
    with torch.inference_mode():
        want = stock(ids).logits
        assert torch.allclose(loaded.model(ids).logits, want, rtol=1e-5, atol=1e-5)
    bf16 = load_model(str(tiny_llama_dir), device="cpu", dtype="bfloat16")
    assert all(
        m.weight.is_contiguous() for m in bf16.model.modules() if isinstance(m, torch.nn.Linear)
    )
