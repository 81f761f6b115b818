"""SamplingParams refuses exactly what the sampler settings refuse, in the same words:
its range rules are the specs of ``loomterm.config.settings`` (one place), so a value the
settings dialog takes is one the engine samples with, and the other way round."""

from __future__ import annotations

import pytest
import torch

from loomterm.config.settings import DEFAULTS, SettingError, Settings
from loomterm.engine.sample.chain import SamplingParams
from loomterm.errors import InputError

SAMPLERS = [name for name, spec in Settings.SPECS.items() if spec.sampling]
RANGED = [n for n in SAMPLERS if Settings.spec(n).kind in (int, float)]


def _edges(name: str) -> tuple[list, list]:
    """(accepted, refused) values at and just past each bound of a numeric sampler."""
    spec = Settings.spec(name)
    step = 1 if spec.kind is int else 1e-6
    good, bad = [], [float("nan"), float("inf"), -float("inf"), True, "1", None]
    if spec.at_least is not None:
        good.append(spec.at_least)
        bad.append(spec.at_least - step)
    if spec.above is not None:
        good.append(spec.above + step)
        bad.append(spec.above)
    if spec.at_most is not None:
        good.append(spec.at_most)
        bad.append(spec.at_most + step)
    if spec.below is not None:
        good.append(spec.below - step)
        bad.append(spec.below)
    if spec.choices is not None:
        good.extend(spec.choices)
        bad.extend([1, 3, -1])
    if spec.kind is int:
        bad.append(1.5)
    return good, bad


@pytest.mark.parametrize("name", RANGED)
def test_engine_and_settings_refuse_the_same_values_in_the_same_words(name):
    good, bad = _edges(name)
    assert good, f"{name} has no bound: nothing to check"
    for value in good:
        assert getattr(SamplingParams(**{name: value}), name) == value
        assert getattr(DEFAULTS.replace(**{name: value}), name) == value
    for value in bad:
        with pytest.raises(SettingError) as engine:
            SamplingParams(**{name: value})
        with pytest.raises(SettingError) as settings:
            DEFAULTS.replace(**{name: value})
        assert str(engine.value) == str(settings.value)
        assert str(engine.value).startswith(f"{name} must be ")
        assert "\n" not in str(engine.value)


def test_the_engine_takes_each_value_in_its_fields_type():
    params = SamplingParams(top_k=40.0, temperature=1, mirostat=2.0, penalty_last_n=64.0)
    assert params.top_k == 40 and type(params.top_k) is int
    assert params.mirostat == 2 and type(params.mirostat) is int
    assert params.penalty_last_n == 64 and type(params.penalty_last_n) is int
    assert params.temperature == 1.0 and type(params.temperature) is float
    assert SamplingParams(dry_sequence_breakers=["a", "b"]).dry_sequence_breakers == ("a", "b")


def test_every_sampler_setting_is_checked_by_the_engine():
    """A sampler setting the engine did not check would let a bad value through to the
    chain: each refuses something (its wrong kind) in SamplingParams."""
    for name in SAMPLERS:
        with pytest.raises(InputError) as info:
            SamplingParams(**{name: object()})
        assert name in str(info.value)


def test_empty_breakers_are_skipped_as_llama_cpp_skips_them():
    """llama.cpp's DRY ignores an empty breaker; so do the engine and the settings, so a
    stray "" neither fails every generation nor changes what the others do."""
    from loomterm.config.settings import Settings

    params = SamplingParams(dry_sequence_breakers=["\n", "", ":"])
    assert params.dry_sequence_breakers == ("\n", ":")
    settings = Settings().replace(dry_sequence_breakers=["\n", ""], dry_multiplier=0.8)
    assert SamplingParams(**settings.sampling()).dry_sequence_breakers == ("\n",)


@pytest.mark.parametrize(
    "value",
    ["\n", [1], ("a", None)],
)
def test_breakers_must_be_a_list_of_strings(value):
    with pytest.raises(InputError) as info:
        SamplingParams(dry_sequence_breakers=value)
    assert str(info.value).startswith("dry_sequence_breakers must be ")
    assert "\n" not in str(info.value).replace("\\n", "")


def test_the_messages_state_each_range():
    messages = {}
    for name, value in [
        ("top_p", 0.0),
        ("min_p", 1.0),
        ("presence_penalty", 2.5),
        ("penalty_last_n", -2),
        ("mirostat", 1),
        ("dry_base", 0.5),
    ]:
        with pytest.raises(InputError) as info:
            SamplingParams(**{name: value})
        messages[name] = str(info.value)
    assert messages == {
        "top_p": "top_p must be a number in (0, 1] (got 0.0)",
        "min_p": "min_p must be a number in [0, 1) (got 1.0)",
        "presence_penalty": "presence_penalty must be a number in [-2, 2] (got 2.5)",
        "penalty_last_n": "penalty_last_n must be a whole number >= -1 (got -2)",
        "mirostat": "mirostat must be one of 0, 2 (got 1)",
        "dry_base": "dry_base must be a number >= 1 (got 0.5)",
    }


def test_token_records_unpack_to_the_chosen_ids_and_top_alternatives():
    from loomterm.engine.sample.chain import token_record_tensor, unpack_token_records

    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0], [5.0, 4.0, 0.0, 1.0]])
    chosen = torch.tensor([2, 0])
    picks, logprobs, alternatives = unpack_token_records(
        token_record_tensor(logits, chosen, k=3).tolist()
    )
    logp = logits.log_softmax(-1)
    assert picks == [2, 0] and all(type(p) is int for p in picks)
    assert logprobs == pytest.approx([logp[0, 2].item(), logp[1, 0].item()], abs=1e-6)
    assert [[t for t, _ in row] for row in alternatives] == [[1, 3, 2], [0, 1, 3]]
    assert [lp for _, lp in alternatives[0]] == pytest.approx(
        [logp[0, 1].item(), logp[0, 3].item(), logp[0, 2].item()], abs=1e-6
    )
    # k larger than the vocabulary: every token, best first.
    _, _, every = unpack_token_records(token_record_tensor(logits, chosen, k=10).tolist())
    assert [t for t, _ in every[1]] == [0, 1, 3, 2]


# -- the chain's glue (sampling.py) ----------------------------------------------------------
from loomterm.engine.sample import chain as S  # noqa: E402
from loomterm.engine.sample.chain import DryBreakers, SamplerState, make_generators  # noqa: E402

LOGITS = torch.tensor([[0.5, 2.0, 1.0, -1.0], [1.5, 0.0, 0.2, 1.4]])
XTC = dict(xtc_probability=0.5, xtc_threshold=0.2)


def test_sample_step_draws_the_xtc_coin_then_the_token_from_each_row():
    params = SamplingParams(**XTC)
    chosen, state = S.sample_step(LOGITS, params, make_generators(9, 2))
    gens = make_generators(9, 2)
    coins = torch.cat([torch.rand(1, generator=g) for g in gens])
    probs = S.filter_logits(LOGITS, params, coins).softmax(-1)
    want = torch.cat([torch.multinomial(probs[b], 1, generator=g) for b, g in enumerate(gens)])
    assert torch.equal(chosen, want) and isinstance(state, SamplerState)
    # Without generators: still one coin per row (any draw), one token per row.
    assert S.sample_step(LOGITS, params)[0].shape == (2,)
    assert S.xtc_coins(params, None, 3).shape == (3,)


def test_without_coins_xtc_acts_on_every_row_and_the_law_is_the_mixture():
    params = SamplingParams(**XTC)
    assert torch.equal(
        S.filter_logits(LOGITS, params), S.filter_logits(LOGITS, params, torch.zeros(2))
    )
    plain = S.filter_logits(LOGITS, params, torch.ones(2)).softmax(-1)
    excluded = S.filter_logits(LOGITS, params, torch.zeros(2)).softmax(-1)
    assert torch.allclose(S.sampling_probs(LOGITS, params), 0.5 * plain + 0.5 * excluded)
    off = SamplingParams(xtc_probability=0.3, xtc_threshold=0.6)  # above 0.5: XTC never acts
    assert torch.equal(S.sampling_probs(LOGITS, off), S.filter_logits(LOGITS, off).softmax(-1))


def test_mirostat_tempers_before_truncating_and_starts_its_own_state():
    params = SamplingParams(mirostat=2, mirostat_tau=1.0, temperature=0.5)
    state = SamplerState.start(params, 2)
    want = S.mirostat_v2_filter(LOGITS / 0.5, state.mu).softmax(-1)
    assert torch.allclose(S.sampling_probs(LOGITS, params, state=state), want)
    chosen, after = S.sample_step(LOGITS, params, make_generators(1, 2))  # no state given
    assert after.mu.shape == (2,) and after.mu.dtype == torch.float32
    with pytest.raises(ValueError, match=r"^mirostat needs its state: SamplerState\.start\(params, rows\)$"):  # fmt: skip
        S.sampling_probs(LOGITS, params)
    with pytest.raises(ValueError, match=r"^mirostat carries state from token to token: use sample_step$"):  # fmt: skip
        S.sample(LOGITS, params)


def test_advance_moves_mu_only_for_a_sampled_mirostat_step():
    state = SamplerState(torch.tensor([4.0, 4.0]))
    probs = LOGITS.softmax(-1)
    chosen = torch.tensor([1, 0])
    for params in (SamplingParams(), SamplingParams(mirostat=2, temperature=0)):
        assert S.advance(state, params, probs, chosen) is state
    moved = S.advance(
        state, SamplingParams(mirostat=2, mirostat_tau=1.0, mirostat_eta=0.5), probs, chosen
    )
    surprise = -probs[[0, 1], [1, 0]].log2()
    assert torch.allclose(moved.mu, 4.0 - 0.5 * (surprise - 1.0))
    off = SamplerState(None)
    assert S.advance(off, SamplingParams(mirostat=2), probs, chosen) is off


def test_the_state_s_dry_breakers_reach_greedy_and_sampled_steps():
    params = SamplingParams(dry_multiplier=5.0, dry_allowed_length=1, temperature=0)
    history = [[1, 2, 0, 1]]  # 2 followed 1 before: DRY cuts 2 (the best logit)
    logits = torch.tensor([[0.0, 0.0, 3.0, 0.0]])
    state = SamplerState(None, DryBreakers.from_sequences([[3]]))
    chosen, _ = S.sample_step(logits, params, None, history, state)
    assert chosen.tolist() != [2]
    sampled = SamplingParams(dry_multiplier=50.0, dry_allowed_length=1)
    picks = {
        int(S.sample(logits, sampled, make_generators(s, 1), history, state)[0]) for s in range(20)
    }
    assert 2 not in picks
    with pytest.raises(ValueError, match=r"^DRY's sequence breakers must be resolved to token ids: SamplerState\.start\(\.\.\., dry_breakers=resolve_dry_breakers\(\.\.\.\)\)$"):  # fmt: skip
        S.sample_step(logits, params, None, history)
