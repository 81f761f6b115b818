"""Re-rotation and the convention probe without a real model: the rotation against an
independent complex-number rotation, and ``probe_rope``'s acceptance rule on synthetic
KV whose convention, scale, noise and dtype are chosen by the test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import PretrainedConfig

from loomterm.engine.kv.rope import RopeSpec, candidate_specs, probe_rope, rerotate, rerotate_kv

INV_FREQ = 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))  # rot = 8


def reference_rotate(keys: torch.Tensor, delta, convention: str, inv_freq) -> torch.Tensor:
    """Each channel pair as a complex number times e^{i delta theta}, in float64."""
    k = keys.double()
    rot = 2 * inv_freq.shape[0]
    delta = torch.as_tensor(delta, dtype=torch.float64)
    angles = (delta[..., None] if delta.ndim else delta) * inv_freq.double()  # ([T,] rot/2)
    turn = torch.polar(torch.ones_like(angles), angles)
    if convention == "half":
        pairs = torch.complex(k[..., : rot // 2], k[..., rot // 2 : rot]) * turn
        rotated = torch.cat([pairs.real, pairs.imag], dim=-1)
    else:
        pairs = torch.complex(k[..., 0:rot:2], k[..., 1:rot:2]) * turn
        rotated = torch.stack([pairs.real, pairs.imag], dim=-1).flatten(-2)
    return torch.cat([rotated, k[..., rot:]], dim=-1)


def random_keys(*shape, scale=1.0, seed=0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


# -- rerotate ------------------------------------------------------------------------------
@pytest.mark.parametrize("convention", ["half", "interleaved"])
@pytest.mark.parametrize("head_dim", [8, 12])  # 12: partial rotary, 4 channels pass through
@pytest.mark.parametrize("delta", [1, 5, -3, 0, 1000])
def test_rerotate_is_a_rotation_of_each_channel_pair(convention, head_dim, delta):
    spec = RopeSpec(convention, INV_FREQ)
    assert spec.rotary_dim == 8
    keys = random_keys(2, 3, 5, head_dim)  # (L, H, T, D)
    got = rerotate(keys, delta, spec)
    torch.testing.assert_close(got, reference_rotate(keys, delta, convention, INV_FREQ).float())
    torch.testing.assert_close(got[..., 8:], keys[..., 8:], rtol=0, atol=0)  # unrotated


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_rerotate_by_a_shift_per_token(convention):
    spec = RopeSpec(convention, INV_FREQ)
    keys = random_keys(2, 3, 4, 10)
    deltas = torch.tensor([0, 3, -7, 250])  # int64, as the engine builds them
    got = rerotate(keys, deltas, spec)
    for t, d in enumerate(deltas.tolist()):
        torch.testing.assert_close(
            got[..., t, :], rerotate(keys[..., t : t + 1, :], d, spec)[..., 0, :]
        )
    torch.testing.assert_close(got, reference_rotate(keys, deltas, convention, INV_FREQ).float())


def test_rotations_compose_and_undo():
    spec = RopeSpec("half", INV_FREQ)
    keys = random_keys(1, 2, 3, 8)
    torch.testing.assert_close(rerotate(rerotate(keys, 4, spec), 9, spec), rerotate(keys, 13, spec))
    torch.testing.assert_close(rerotate(rerotate(keys, 11, spec), -11, spec), keys)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_rerotate_keeps_the_dtype_and_does_the_math_in_float32(dtype):
    spec = RopeSpec("interleaved", INV_FREQ)
    keys = random_keys(1, 2, 3, 8).to(dtype)
    got = rerotate(keys, 7, spec)
    assert got.dtype == dtype
    want = reference_rotate(keys.float(), 7, "interleaved", INV_FREQ).to(dtype)
    torch.testing.assert_close(got, want)


def test_rerotate_kv_moves_keys_only_and_leaves_its_input():
    spec = RopeSpec("half", INV_FREQ)
    kv = random_keys(2, 2, 3, 4, 8)  # (L, 2, H, T, D)
    before = kv.clone()
    moved = rerotate_kv(kv, 6, spec)
    torch.testing.assert_close(moved[:, 0], rerotate(kv[:, 0], 6, spec))
    assert torch.equal(moved[:, 1], kv[:, 1])
    assert torch.equal(kv, before) and moved.data_ptr() != kv.data_ptr()


# -- candidate_specs -----------------------------------------------------------------------
class Rotary(nn.Module):
    def __init__(self, inv_freq: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("inv_freq", inv_freq)


class FakeModel(nn.Module):
    """What candidate_specs reads: ``config``, ``modules()`` and ``parameters()``."""

    def __init__(self, config, inv_freq=None, device="cpu") -> None:
        super().__init__()
        self.config = config
        self.proj = nn.Linear(2, 2, device=device)
        self.table = Rotary(torch.zeros(3, 4))  # a 2-D buffer named inv_freq is no frequency
        if inv_freq is not None:
            self.rotary = Rotary(inv_freq)
            self.second = Rotary(inv_freq * 2)  # only the first one counts


class PlainConfig(SimpleNamespace):
    """A config as remote code may write it: plain attributes, older names kept apart
    (transformers' own configs alias ``rope_scaling`` to ``rope_parameters``)."""

    def get_text_config(self, decoder=None, encoder=None):
        return self


def config(**fields) -> PlainConfig:
    return PlainConfig(**fields)


def test_candidates_from_inv_freq_half_first():
    specs = candidate_specs(FakeModel(config(), INV_FREQ))
    assert [s.convention for s in specs] == ["half", "interleaved"]
    for spec in specs:
        torch.testing.assert_close(spec.inv_freq, INV_FREQ, rtol=0, atol=0)
        assert spec.inv_freq.dtype == torch.float32


def test_candidates_from_rotary_dim_without_inv_freq():
    """GPT-J keeps a sinusoid table, not ``inv_freq``: frequencies from ``rotary_dim``
    and ``rope_theta`` (10000 when unset)."""
    specs = candidate_specs(FakeModel(config(rotary_dim=8)))
    assert [s.convention for s in specs] == ["half", "interleaved"]
    torch.testing.assert_close(specs[0].inv_freq, INV_FREQ, rtol=1e-6, atol=0)
    theta = candidate_specs(FakeModel(config(rotary_dim=8, rope_theta=500.0)))[1]
    want = 1.0 / (500.0 ** (torch.arange(0, 8, 2) / 8))
    torch.testing.assert_close(theta.inv_freq, want, rtol=1e-6, atol=0)
    assert theta.inv_freq.dtype == torch.float32 and theta.rotary_dim == 8


def test_no_frequencies_no_candidates():
    assert candidate_specs(FakeModel(config())) == []
    assert candidate_specs(FakeModel(config(rotary_dim=0))) == []


def test_candidates_live_on_the_models_device():
    specs = candidate_specs(FakeModel(config(rotary_dim=8), device="meta"))
    assert all(s.inv_freq.device.type == "meta" for s in specs)


@pytest.mark.parametrize(
    "fields",
    [
        {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}},
        {"rope_parameters": {"rope_type": "longrope"}},
        {"rope_scaling": {"rope_type": "dynamic"}},  # older configs (remote code)
        {"rope_scaling": {"type": "longrope"}},  # the older key
        {"rope_parameters": None, "rope_scaling": {"type": "dynamic"}},
    ],
)
def test_length_dependent_rope_is_never_shifted(fields):
    assert candidate_specs(FakeModel(config(**fields), INV_FREQ)) == []


@pytest.mark.parametrize(
    "fields",
    [
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0}},
        {"rope_scaling": {"type": "yarn"}},
        {"rope_parameters": {}},
    ],
)
def test_frequency_only_scaling_is_shiftable(fields):
    assert len(candidate_specs(FakeModel(config(**fields), INV_FREQ))) == 2


def test_a_composite_config_is_read_at_its_text_decoder():
    """A model with a text encoder and a text decoder: the decoder's RoPE counts."""
    composite = PretrainedConfig()
    composite.text_encoder = PretrainedConfig()
    composite.text_config = PretrainedConfig(
        rope_parameters={"rope_type": "dynamic", "factor": 2.0}
    )
    assert candidate_specs(FakeModel(composite, INV_FREQ)) == []


# -- probe_rope ----------------------------------------------------------------------------
class Synthetic:
    """``compute_kv`` for a model that rotates its keys by ``convention`` (the reference
    rotation, not loomterm's), with chosen magnitudes, noise and dtype."""

    def __init__(
        self,
        convention="interleaved",
        keys=1.0,
        values=1.0,
        noise=0.0,
        values_noise=0.0,
        dtype=torch.float32,
    ):
        self.convention, self.dtype = convention, dtype
        self.keys = random_keys(2, 2, 64, 8, scale=keys, seed=1)  # at position 0
        self.values = random_keys(2, 2, 64, 8, scale=values, seed=2)
        self.noise, self.values_noise = noise, values_noise  # of the keys' scale; absolute
        self.calls: list[tuple[list[int], int]] = []

    def __call__(self, tokens: list[int], offset: int) -> torch.Tensor:
        self.calls.append((list(tokens), offset))
        n = len(tokens)
        k = reference_rotate(self.keys[:, :, :n], offset, self.convention, INV_FREQ)
        v = self.values[:, :, :n].double()
        if offset:  # what the shifted forward gets wrong
            k = k + self.noise * k.abs().amax() * random_keys(*k.shape, seed=3).double().sign()
            v = v + self.values_noise
        return torch.stack([k, v], dim=1).to(self.dtype)  # (L, 2, H, T, D)


def probe(synthetic: Synthetic):
    return probe_rope(FakeModel(config(), INV_FREQ), synthetic, vocab_size=50)


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_the_probe_finds_the_convention(convention):
    found = probe(Synthetic(convention))
    assert found is not None and found.convention == convention
    torch.testing.assert_close(found.inv_freq, INV_FREQ, rtol=0, atol=0)


def test_the_probe_compares_two_placements_of_the_same_tokens():
    synthetic = Synthetic()
    probe(synthetic)
    (first, at_zero), (second, shifted) = synthetic.calls[:2]
    assert first == second and len(first) >= 8 and all(0 <= t < 50 for t in first)
    assert at_zero == 0 and shifted > 0 and len(synthetic.calls) == 2


def test_the_probe_is_deterministic_and_leaves_the_global_generator_alone():
    first, second = Synthetic(), Synthetic()
    model = FakeModel(config(), INV_FREQ)
    torch.manual_seed(0)
    probe_rope(model, first, 50)
    after = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(3), after)  # the probe drew nothing from it
    probe_rope(model, second, 50)
    assert first.calls == second.calls


def test_nothing_to_probe_without_candidates():
    def never(tokens, offset):
        raise AssertionError("no candidates: no forward pass")

    model = FakeModel(config(rope_parameters={"rope_type": "longrope"}), INV_FREQ)
    assert probe_rope(model, never, 50) is None


def test_keys_that_are_no_rotation_fail():
    assert probe(Synthetic(noise=0.5)) is None


def test_values_that_move_fail():
    """Keys rotate correctly, but the values depend on position too (say, absolute
    position embeddings on top): shifting would be wrong."""
    assert probe(Synthetic(values_noise=0.05)) is None


def test_the_error_is_relative_to_the_keys_scale():
    # Tiny keys: the wrong convention's absolute error is tiny too, yet it is 100% off.
    assert probe(Synthetic("interleaved", keys=1e-4)).convention == "interleaved"
    # Big values do not make a wrong convention look close.
    assert probe(Synthetic("interleaved", values=1e4)).convention == "interleaved"
    # Big keys: float noise and a small drift of the values are small next to them.
    big = probe(Synthetic("half", keys=1e3, values_noise=1e-1))
    assert big is not None and big.convention == "half"
    assert probe(Synthetic("half", keys=1e3, values_noise=50.0)) is None


@pytest.mark.parametrize(
    "dtype, noise, found",
    [
        (torch.float32, 1e-3, True),
        (torch.float32, 1e-2, False),  # float32 allows 2e-3 of the keys' scale
        (torch.bfloat16, 1e-2, True),  # half precision allows 3e-2
        (torch.float16, 1e-2, True),
        (torch.float16, 1e-1, False),
    ],
)
def test_the_tolerance_follows_the_dtype(dtype, noise, found):
    result = probe(Synthetic("half", noise=noise, dtype=dtype))
    assert (result is not None) == found
    if found:
        assert result.convention == "half"


def test_an_error_at_the_tolerance_fails():
    """The rule is strict: relative error below 2e-3 (float32) passes, 2e-3 itself does
    not. No rotation at all (zero frequencies) makes re-rotating exact, so the error is
    exactly the offset the test puts in, on keys whose scale is exactly 1."""
    model = FakeModel(config(), torch.zeros(4))
    tol = torch.tensor(2e-3)  # as float32
    below = float(torch.nextafter(tol, torch.tensor(0.0)))

    def kv_with(key_error: float, value_error: float):
        def compute_kv(tokens, offset):
            kv = torch.zeros(1, 2, 1, len(tokens), 8)  # (L, 2, H, T, D)
            kv[0, 0, 0, 0, 0] = 1.0  # the keys' scale
            if offset:
                kv[0, 0, 0, 1, 0] = key_error
                kv[0, 1, 0, 1, 0] = value_error
            return kv

        return compute_kv

    assert probe_rope(model, kv_with(below, below), 50) is not None
    assert probe_rope(model, kv_with(float(tol), 0.0), 50) is None
    assert probe_rope(model, kv_with(0.0, float(tol)), 50) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_rerotate_takes_shifts_from_the_cpu():
    spec = RopeSpec("half", INV_FREQ.cuda())
    keys = random_keys(1, 2, 3, 8).cuda()
    deltas = torch.tensor([1, -4, 9])  # built on the CPU
    got = rerotate(keys, deltas, spec)
    assert got.device == keys.device
    want = reference_rotate(keys.cpu(), deltas, "half", INV_FREQ).float()
    torch.testing.assert_close(got.cpu(), want)
