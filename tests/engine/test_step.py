"""The written-out decode step (``engine.kernels.step``) against the model's own forward, and
its CUDA graph (tests marked ``cuda``: they skip without a GPU, and have never run on
the machine they were written on)."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from loomterm.engine import Loom
from loomterm.engine.kernels import cpu_linear, layer_calls
from loomterm.engine.kernels import fused as fused_module
from loomterm.engine.kernels.step import GRAPH_BATCHES, DecodeStep, unsupported
from loomterm.engine.models.load import load_model
from tests.helpers import assert_matches_recompute, relative_error
from tests.tiny_models import build_tiny_family

PROMPT = "Once upon a time, in a land far away"
LOW_TOL = 2e-2  # bfloat16 (see tests/engine/test_quant.py)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory):
    return build_tiny_family(tmp_path_factory.mktemp("qwen2") / "qwen2", "qwen2")


def _loom(folder, **kwargs) -> Loom:
    device = kwargs.pop("device", "cpu")
    return Loom.from_loaded(load_model(str(folder), device=device, **kwargs))


def _both_ways(loom: Loom, fed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(step, generic forward) logits for ``fed`` at the working cache's end."""
    runner = loom.runner
    step = runner.step(fed)[:, -1].float()
    runner.work.pending = 0
    generic = runner.forward(fed[:, None])[:, -1].float()
    runner.work.pending = 0
    return step, generic


@pytest.mark.parametrize("which", ["llama", "qwen2"])
@pytest.mark.parametrize("quant", ["none", "f16", "int8", "int4"])
def test_the_step_equals_the_generic_forward(which, quant, tiny_llama_dir, qwen2_dir):
    folder = tiny_llama_dir if which == "llama" else qwen2_dir
    loom = _loom(folder, dtype="float32", quant=quant)
    assert isinstance(loom.runner.step, DecodeStep)
    _assert_step_is_forward(loom)


def _assert_step_is_forward(loom: Loom, tol: float = 1e-5) -> None:
    node = loom.append(loom.root, PROMPT)
    loom.next_logits(node)
    runner = loom.runner
    for batch in (1, 3):
        runner.work.fork(batch, columns=runner.work.length + 4)
        fed = torch.tensor([5, 9, 11][:batch])
        step, generic = _both_ways(loom, fed)
        assert relative_error(step, generic) < tol
    runner.work.select_row(0, runner.work.segments)


def _linear_kernels(run) -> dict[str, int]:
    """How many times ``run()`` called oneDNN's inner product and aten's ``mm``/``addmm``
    (where ``F.linear`` of one row goes), from torch's profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    counts = {event.key: event.count for event in prof.key_averages()}
    return {
        "onednn": counts.get("mkldnn::_linear_pointwise", 0),
        "aten": counts.get("aten::mm", 0) + counts.get("aten::addmm", 0),
    }


@pytest.mark.skipif(not cpu_linear.onednn_available(), reason="oneDNN's inner product is not here")
def test_a_step_and_a_block_of_a_float_model_multiply_on_onednn(tiny_llama_dir):
    """A plain step of a float32 model (its one row padded to four) and a drafted
    block multiply every product on oneDNN's reordered weights, none on aten's ``mm``;
    so does a quantized model's step in the float layers it keeps (v_proj)."""
    loom = _loom(tiny_llama_dir, dtype="float32")
    node = loom.append(loom.root, PROMPT)
    loom.next_logits(node)
    runner = loom.runner
    layers = len(runner.model.model.layers)

    def step():
        runner.step(torch.tensor([5]))
        runner.work.pending = 0

    def block():
        runner.step.block([5, 7, 9], [0, 1, 2], None, 3)
        runner.work.pending = 0

    for run in (step, block):
        kernels = _linear_kernels(run)
        assert kernels["onednn"] >= 7 * layers + 1 and kernels["aten"] == 0  # and the head
    quantized = _loom(tiny_llama_dir, dtype="float32", quant="int4")
    quantized.next_logits(quantized.append(quantized.root, PROMPT))
    other = quantized.runner

    def quantized_step():
        other.step(torch.tensor([5]))
        other.work.pending = 0

    kernels = _linear_kernels(quantized_step)
    assert kernels["onednn"] >= layers and kernels["aten"] == 0  # its float v_proj layers


@pytest.mark.parametrize("quant", ["none", "int4"])
def test_the_steps_other_branches_equal_the_generic_forward(quant, tiny_llama_dir):
    """The model's own rotation (taken when the fast one would differ) and the score
    scale applied per layer (taken when it is not a power of two) give the same logits."""
    loom = _loom(tiny_llama_dir, dtype="float32", quant=quant)
    step = loom.runner.step
    assert step.rope_fast and step.head_scale is not None  # head_dim 16: scale 1/4
    step.rope_fast, step.head_scale = False, None
    _assert_step_is_forward(loom)


@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_a_step_over_unfused_layers_and_foreign_norms(quant, tiny_llama_dir, monkeypatch):
    """Layers that do not fuse (each product on its own, q and k joined for the
    rotation), and norms called as the model's own modules."""
    monkeypatch.setattr(fused_module, "_kind", lambda module: None)
    monkeypatch.setattr(layer_calls, "rms_norm", lambda module, dtype: module)
    loom = _loom(tiny_llama_dir, dtype="float32", quant=quant)
    groups = fused_module.fuse_layer(loom.runner.model.model.layers[0])
    assert [g.names for g in groups.attention] == [("q_proj",), ("k_proj",), ("v_proj",)]
    _assert_step_is_forward(loom)


def test_norms_and_rotations_of_another_form_keep_their_own_code():
    class OnePlus(torch.nn.Module):  # Gemma's form: (1 + weight)
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(32))
            self.variance_epsilon = 1e-6

        def forward(self, x):
            normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
            return normed * (1 + self.weight)

    norm = OnePlus()
    assert layer_calls.rms_norm(norm, torch.float32) is norm
    llama_norm = LlamaRMSNorm(32, eps=1e-6)
    llama_norm.weight.data = torch.randn(32)
    assert layer_calls.rms_norm(llama_norm, torch.float32) is not llama_norm

    def interleaved(q, k, cos, sin):  # GPT-J's pairs (x0, x1), (x2, x3)...
        def turn(x):
            pairs = torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
            return x * cos.unsqueeze(1) + pairs * sin.unsqueeze(1)

        return turn(q), turn(k)

    assert not layer_calls.rotation_matches(interleaved, 16, torch.device("cpu"), torch.float32)
    assert layer_calls.rotation_matches(
        apply_rotary_pos_emb, 16, torch.device("cpu"), torch.float32
    )


@pytest.mark.default_model
@pytest.mark.parametrize("quant", ["none", "f16", "int8", "int4"])
def test_on_the_default_model_the_step_equals_the_generic_forward(quant):
    """SmolLM2-135M: the step's logits are the generic forward's, and greedy decoding
    through the step writes the tokens (and ends on the logits) decoding through the
    generic forward does. (Against a recompute from scratch a quantized model differs
    by up to 2% of the largest logit on main too: prefill and decode round to bfloat16
    at other places.)"""
    loaded = load_model(None, device="cpu", dtype="float32", quant=quant)
    loom = Loom.from_loaded(loaded)
    assert isinstance(loom.runner.step, DecodeStep)
    _assert_step_is_forward(loom)
    plain = Loom.from_loaded(loaded)
    plain.runner.step = None
    ends = []
    for each in (loom, plain):
        node = each.append(each.root, PROMPT)
        (kid,) = each.generate(node, 16, temperature=0)
        ends.append((kid, each.next_logits(kid)))
    (stepped, logits), (generic, want) = ends
    assert stepped.tokens == generic.tokens
    assert relative_error(logits, want) < 1e-4
    if quant in ("none", "f16"):  # float32 products: a recompute agrees to float32 noise
        assert_matches_recompute(loom, stepped)


def test_generation_through_the_step_equals_a_recompute(tiny_llama_dir, qwen2_dir):
    for folder in (tiny_llama_dir, qwen2_dir):
        loom = _loom(folder, dtype="float32")
        node = loom.append(loom.root, PROMPT)
        for kid in loom.generate(node, 10, n=3, temperature=1.0, seed=4):
            assert_matches_recompute(loom, kid)


def test_the_graph_body_masked_over_the_whole_buffer(tiny_llama_dir):
    """What the CUDA graph runs (attention over every column, a mask from the column
    tensor, the tail zeroed), run eagerly on the CPU: the same logits."""
    loom = _loom(tiny_llama_dir, dtype="float32")
    node = loom.append(loom.root, PROMPT)
    loom.next_logits(node)
    runner = loom.runner
    work = runner.work
    work.fork(2, columns=work.length + 8)
    step = runner.step
    length, capacity = work.length, work.capacity
    assert capacity > length + 1
    work.buf[:, :, :2, :, length:] = float("nan")  # as uninitialised memory might be
    work.buf[:, :, :2, :, length:].zero_()  # what binding a graph does
    fed = torch.tensor([7, 8])
    ids, positions = fed.view(2, 1), torch.full((2, 1), length)
    column = torch.tensor([length])
    mask = torch.where(torch.arange(capacity) > column, torch.finfo(torch.float32).min, 0.0)
    masked = step.run(ids, positions, column, capacity, mask.float())[:, -1]
    exact = step.run(ids, positions, column, length + 1, None)[:, -1]
    assert torch.isfinite(masked).all()
    assert relative_error(masked, exact) < 1e-5


def test_models_it_does_not_know_take_the_generic_forward(tiny_gpt2_dir, tmp_path):
    loom = _loom(tiny_gpt2_dir, dtype="float32")
    assert loom.runner.step is None
    assert "gpt2" in unsupported(loom.runner.model)
    dynamic = build_tiny_family(tmp_path / "dyn", "llama-dynamic")
    assert "dynamic" in unsupported(_loom(dynamic, dtype="float32").runner.model)
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 6, temperature=0)
    assert_matches_recompute(loom, kid)


# -- CUDA: never run where this was written ---------------------------------------------------
@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("batch", GRAPH_BATCHES)
def test_cuda_graph_replay_equals_the_eager_step(tiny_llama_dir, batch):
    loom = _loom(tiny_llama_dir, device="cuda", dtype="bfloat16")
    runner = loom.runner
    assert runner.step.graphs_on
    node = loom.append(loom.root, PROMPT)
    loom.next_logits(node)
    runner.work.fork(batch, columns=runner.work.length + 8)
    fed = torch.arange(5, 5 + batch, device="cuda")
    for _ in range(3):  # capture on the first call, replay after; columns advance
        graphed = runner.step(fed)[:, -1].float()
        length = runner.work.length
        runner.step.graphs_on = False
        eager = runner.step(fed)[:, -1].float()
        runner.step.graphs_on = True
        assert relative_error(graphed, eager) < LOW_TOL
        runner.work.commit(1)
        assert runner.work.length == length + 1


@pytest.mark.cuda
@cuda
def test_cuda_generation_equals_a_recompute_in_bfloat16(tiny_llama_dir):
    loom = _loom(tiny_llama_dir, device="cuda", dtype="bfloat16")
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 12, temperature=0)
    assert_matches_recompute(loom, kid, LOW_TOL)
    for child in loom.generate(node, 8, n=4, temperature=1.0, seed=2):
        assert_matches_recompute(loom, child, LOW_TOL)
    cut = loom.truncate(kid, node.end + 3)
    assert_matches_recompute(loom, cut, LOW_TOL)


@pytest.mark.cuda
@cuda
def test_cuda_int8_generation_equals_a_recompute(tiny_llama_dir):
    loom = _loom(tiny_llama_dir, device="cuda", quant="int8")
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 12, temperature=0)
    assert_matches_recompute(loom, kid, LOW_TOL)


def _block_both_ways(loom: Loom, ids, offsets, mask):
    """(block, generic forward) logits and the block's KV columns, each way."""
    runner, work = loom.runner, loom.runner.work
    length, q = work.length, len(ids)
    fast = runner.step.block(ids, offsets, mask, q).float()
    assert work.pending == q
    fast_kv = work.buf[:, :, 0, :, length : length + q].clone()
    work.pending = 0
    positions = torch.tensor([offsets]) + length
    full = torch.ones(1, 1, q, length + q, dtype=torch.bool)
    full[0, 0, :, length:] = mask if mask is not None else torch.ones(q, q).tril().bool()
    generic = runner.forward(torch.tensor([ids]), keep=q, positions=positions, attention_mask=full)[
        0
    ].float()
    generic_kv = work.buf[:, :, 0, :, length : length + q].clone()
    work.pending = 0
    return fast, generic, fast_kv, generic_kv


@pytest.mark.parametrize("which", ["llama", "qwen2", "llama, the model's rotation"])
@pytest.mark.parametrize("quant", ["none", "f16", "int8", "int4"])
def test_a_drafted_block_equals_the_generic_forward(which, quant, tiny_llama_dir, qwen2_dir):
    """The verification block (``DecodeStep.block``): a tree of drafts under its mask and
    a plain chain, logits and written KV against the model's forward with the same
    positions and mask (also through the model's own rotation and a per-layer scale)."""
    folder = qwen2_dir if which == "qwen2" else tiny_llama_dir
    loom = _loom(folder, dtype="float32", quant=quant)
    if "rotation" in which:
        loom.runner.step.rope_fast, loom.runner.step.head_scale = False, None
    node = loom.append(loom.root, PROMPT)
    loom.next_logits(node)
    # root 5; children 7 and 8; 7 -> 9 -> 10; 8 -> 11 (depths 0, 1, 1, 2, 3, 2)
    ids, offsets = [5, 7, 8, 9, 10, 11], [0, 1, 1, 2, 3, 2]
    parents = [-1, 0, 0, 1, 3, 2]
    mask = torch.zeros(6, 6, dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] = mask[parent]
        mask[i, i] = True
    for block in ((ids, offsets, mask), ([5, 7, 9], [0, 1, 2], None), ([5], [0], None)):
        fast, generic, fast_kv, generic_kv = _block_both_ways(loom, *block)
        assert relative_error(fast, generic) < 1e-5
        assert relative_error(fast_kv.float(), generic_kv.float()) < 1e-5
    # A token sees only its ancestors: sibling 8's logits do not change with 7's branch.
    other = [5, 7, 8, 12, 13, 11]
    again, _, _, _ = _block_both_ways(loom, other, offsets, mask)
    first, _, _, _ = _block_both_ways(loom, ids, offsets, mask)
    assert torch.equal(again[[0, 1, 2, 5]], first[[0, 1, 2, 5]])
    assert not torch.equal(again[3], first[3])
