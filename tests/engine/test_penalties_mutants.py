"""Stages 1-3 (``engine/sample/penalties.py``) against their definitions, for the edges the
mutation run found untested: llama.cpp's ``get_overlapping_token_sequences`` for DRY's
breakers, the logit-bias table of the settings (ids and text merged), the histories the
penalties accept, and the exact arithmetic of each penalty. No model: hand-made
vocabularies and logits."""

from __future__ import annotations

import math

import pytest
import torch

from loomterm.engine.sample import penalties as P
from loomterm.engine.sample.chain import DryBreakers, SamplerState, SamplingParams
from loomterm.errors import InputError

DRY = dict(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2, dry_sequence_breakers=())


def tails(breakers: DryBreakers) -> dict[int, set[tuple[int, ...]]]:
    return {head: set(options) for head, options in breakers.tails.items()}


# -- DRY's breakers from strings (llama.cpp's get_overlapping_token_sequences) ----------------
def fake_encode(text: str) -> list[int]:
    """Each character is its own token, numbered from 100 (tails are easy to read)."""
    return [100 + ord(c) - ord("a") for c in text]


def test_a_head_may_end_with_the_breakers_start_at_every_overlap():
    """ "xaaa" ends with "a", "aa" and "aaa", three starts of "aaab": three tails, one
    per overlap (llama.cpp tries every occurrence of the first character in order)."""
    breakers = P.resolve_dry_breakers(["aaab"], ["xaaa", "q"], fake_encode)
    b, a = 101, 100
    assert tails(breakers) == {0: {(b,), (a, b), (a, a, b)}}


def test_only_a_word_that_ends_inside_the_breaker_is_a_head():
    # "xab" holds "ab" whole: a single-token breaker. "ya" ends with "a": a head.
    # "az" has "a" but goes on with "z", "ba" ends with "a" after a mismatch, "zz" has
    # no "a" at all.
    pieces = ["xab", "ya", "az", "ba", "zz", "aab"]
    breakers = P.resolve_dry_breakers(["", "abc"], pieces, fake_encode)  # "" is skipped
    assert tails(breakers) == {1: {(101, 102)}, 3: {(101, 102)}, 0: {(102,)}, 5: {(102,)}}
    whole = P.resolve_dry_breakers(["ab"], pieces, fake_encode)
    assert whole.singles == {0, 5}
    assert tails(whole) == {0: {()}, 1: {(101,)}, 3: {(101,)}, 5: {()}}


def test_a_breaker_is_cut_to_40_characters_and_its_tail_to_20_tokens():
    long = "a" + "b" * 59  # 60 characters
    breakers = P.resolve_dry_breakers([long], ["qa", "a" + "b" * 39 + "Z"], fake_encode)
    # The 40-character cut is inside the second piece: a single-token breaker.
    assert breakers.singles == {1}
    # The tail after "a" is 39 "b"s (of the cut breaker), tokenised, then cut to 20.
    assert tails(breakers)[0] == {(101,) * 20}


def test_repeated_tails_are_kept_once():
    breakers = P.resolve_dry_breakers(["ab", "ab"], ["xa"], fake_encode)
    assert breakers.tails == {0: ((101,),)}
    again = DryBreakers.from_sequences([[5, 6], [5, 6], [5], [], [7]])
    assert again.tails == {5: ((6,), ()), 7: ((),)}
    assert again.singles == {5, 7}


def test_the_breakers_survive_selecting_rows():
    breakers = DryBreakers.from_sequences([[3]])
    state = SamplerState(torch.tensor([1.0, 2.0, 3.0]), breakers)
    picked = state.select([2, 0, 0])
    assert picked.mu.tolist() == [3.0, 1.0, 1.0] and picked.dry_breakers is breakers
    off = SamplerState(None, breakers)
    assert off.select([0]).dry_breakers is breakers and off.select([0]).mu is None


# -- the logit bias of a settings table ------------------------------------------------------
def test_a_settings_table_merges_ids_and_text():
    encode = {"ab": [7, 8], "b": [8], "c": [5]}.__getitem__
    table = {5: 1.5, "7": -2.0, "ab": 3.0, "b": 0.25, "c": 1.0}
    assert P.resolve_logit_bias(table, encode) == {5: 2.5, 7: 1.0, 8: 3.25}
    # "never" on either side wins over any number.
    assert P.resolve_logit_bias({"ab": "never", 7: 4.0}, encode) == {7: "never", 8: "never"}
    assert P.resolve_logit_bias({"ab": 1.0, "8": "never"}, encode) == {7: 1.0, 8: "never"}
    # Ids alone: no tokenising at all.
    assert P.resolve_logit_bias({3: -1.0, "4": "never"}, None) == {3: -1.0, 4: "never"}
    assert P.resolve_logit_bias({}, None) == {}


def test_text_that_looks_like_a_number_only_in_part_is_text():
    seen = []

    def encode(text):
        seen.append(text)
        return [1]

    assert P.resolve_logit_bias({" 12": 1.0, "12a": 2.0}, encode) == {1: 3.0}
    assert seen == [" 12", "12a"]


def test_biases_from_strings_add_up_and_never_is_never():
    encode = {"x": [1, 1], "y": [1, 2]}.__getitem__
    assert P.logit_bias_from_strings({"x": 0.5, "y": 0.25}, encode) == {1: 1.25, 2: 0.25}
    assert P.logit_bias_from_strings({"x": "never", "y": 3}, encode) == {1: "never", 2: 3.0}
    with pytest.raises(InputError, match="logit_bias values must be numbers"):
        P.logit_bias_from_strings({"x": "often"}, encode)


@pytest.mark.parametrize(
    "value, message",
    [
        (5, "logit_bias must map token ids"),
        ([(1, 2, 3)], "logit_bias must map token ids"),
        ({True: 1.0}, "logit_bias keys must be token ids >= 0, got True"),
        ({-1: 1.0}, "logit_bias keys must be token ids >= 0, got -1"),
        ({"x": 1.0}, "logit_bias keys must be token ids >= 0, got 'x'"),
        ({1: True}, "logit_bias values must be numbers or 'never', got True"),
        ({1: math.inf}, "logit_bias values must be numbers or 'never', got inf"),
        ({1: math.nan}, "logit_bias values must be numbers or 'never', got nan"),
    ],
)
def test_a_bad_bias_is_refused_in_one_line(value, message):
    with pytest.raises(InputError) as info:
        P.normalise_bias(value)
    assert str(info.value).startswith(message)


def test_bias_pairs_are_sorted_summed_and_read_from_digit_strings():
    assert P.normalise_bias(None) == ()
    assert P.normalise_bias([(3, 1), (" 1 ", 2.5), (3, -0.5), (2, -math.inf)]) == (
        (1, 2.5),
        (2, -math.inf),
        (3, 0.5),
    )
    out = P.normalise_bias({4: "never", 0: 0})
    assert out == ((0, 0.0), (4, -math.inf)) and all(type(b) is float for _, b in out)


def test_logit_bias_adds_in_float32_and_leaves_the_input_alone():
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]], dtype=torch.bfloat16)
    out = P.apply_logit_bias(logits, {0: -1.0, 2: "never", 7: 5.0})
    assert out.dtype == torch.float32
    assert out.tolist() == [[0.0, 2.0, -math.inf], [-0.5, 0.5, -math.inf]]
    assert logits.tolist() == [[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]]
    assert P.apply_logit_bias(logits, {9: 1.0}) is logits  # nothing in the vocabulary


# -- histories -------------------------------------------------------------------------------------
def test_histories_as_tensor_lists_or_ragged_rows():
    rect = P._history_rows([[1, 2], torch.tensor([3, 4])], 2)
    assert isinstance(rect, torch.Tensor) and rect.tolist() == [[1, 2], [3, 4]]
    assert rect.dtype == torch.long
    ragged = P._history_rows([[1], [2, 3]], 2)
    assert [r.tolist() for r in ragged] == [[1], [2, 3]]
    # Rows given as int32 tensors come back as the int64 ids gather and scatter need.
    small = [torch.tensor([1, 2], dtype=torch.int32), torch.tensor([3], dtype=torch.int32)]
    assert all(r.dtype == torch.long for r in P._history_rows(small, 2))
    assert P._history_rows(small[:1] * 2, 2).dtype == torch.long
    params = SamplingParams(repetition_penalty=2.0)
    out = P.apply_penalties(torch.ones(2, 4), small, params)
    assert out.tolist() == [[1.0, 0.5, 0.5, 1.0], [1.0, 1.0, 1.0, 0.5]]
    with pytest.raises(ValueError, match=r"history must be \(B=2, T\), got \(3, 1\)"):
        P._history_rows(torch.zeros(3, 1, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"history must be \(B=2, T\), got \(2,\)"):
        P._history_rows(torch.zeros(2, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"one row per logits row \(2\)"):
        P._history_rows([[1]], 2)


def test_last_n_tokens():
    tokens = torch.tensor([[1, 2, 3, 4]])
    assert P._last(tokens, -1).tolist() == [[1, 2, 3, 4]]
    assert P._last(tokens, 4).tolist() == [[1, 2, 3, 4]]
    assert P._last(tokens, 9).tolist() == [[1, 2, 3, 4]]
    assert P._last(tokens, 3).tolist() == [[2, 3, 4]]
    assert P._last(tokens, 1).tolist() == [[4]]
    assert P._last(tokens, 0).tolist() == [[]]


# -- the penalties' arithmetic ----------------------------------------------------------------------
def test_repetition_penalty_divides_positive_and_multiplies_the_rest():
    logits = torch.tensor([[2.0, -2.0, 0.0, 4.0, 1.0]])
    history = torch.tensor([[0, 1, 2, 0]])  # 0 twice: penalised once (CTRL, llama.cpp)
    out = P.apply_repetition_penalty(logits, history, 2.0)
    assert out.tolist() == [[1.0, -4.0, 0.0, 4.0, 1.0]]
    empty = torch.zeros(1, 0, dtype=torch.long)
    assert P.apply_repetition_penalty(logits, empty, 2.0) is logits
    assert P.apply_repetition_penalty(logits, history, 1.0) is logits


def test_counts_per_row():
    counts = P.token_counts(torch.tensor([[1, 1, 3], [0, 2, 2]]), 4)
    assert counts.tolist() == [[0, 2, 0, 1], [1, 0, 2, 0]] and counts.dtype == torch.float32
    assert P.token_counts(torch.zeros(2, 0, dtype=torch.long), 3).tolist() == [[0] * 3] * 2


def test_frequency_and_presence_subtract_exactly():
    logits = torch.zeros(2, 4)
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25, penalty_last_n=3)
    history = [[3, 1, 1, 2], [0, 0, 0, 0]]  # the last 3: (1, 1, 2) and (0, 0, 0)
    out = P.apply_penalties(logits, history, params)
    assert out.tolist() == [[0.0, -1.0, -0.75, 0.0], [-1.25, 0.0, 0.0, 0.0]]
    # Presence alone, frequency alone.
    only = P.apply_penalties(logits, history, SamplingParams(presence_penalty=1.0))
    assert only.tolist() == [[0.0, -1.0, -1.0, -1.0], [-1.0, 0.0, 0.0, 0.0]]
    only = P.apply_penalties(logits, history, SamplingParams(frequency_penalty=-1.0))
    assert only.tolist() == [[0.0, 2.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]]


def test_repetition_then_presence_on_ragged_rows():
    logits = torch.tensor([[3.0, -1.0, 2.0], [3.0, -1.0, 2.0]])
    params = SamplingParams(repetition_penalty=2.0, presence_penalty=1.0)
    out = P.apply_penalties(logits, [[0], [1, 2]], params)
    assert out.tolist() == [[0.5, -1.0, 2.0], [3.0, -3.0, 0.0]]
    assert P.apply_penalties(logits, None, params) is logits
    off = SamplingParams(repetition_penalty=1.5, penalty_last_n=0)
    assert P.apply_penalties(logits, [[0], [1]], off) is logits


# -- DRY's arithmetic --------------------------------------------------------------------------------
def test_dry_penalty_and_its_cap():
    params = SamplingParams(**DRY)
    assert P.dry_penalty(2, params) == 0.8
    assert P.dry_penalty(4, params) == pytest.approx(0.8 * 1.75**2)
    assert P.dry_penalty(1, params) == pytest.approx(0.8 / 1.75)
    # The cap: int(log(FLT_MAX) / log(base)), no cap for a base at 1 (nothing grows).
    big = SamplingParams(**{**DRY, "dry_base": 2.0})
    cap = int(88.7228391 / math.log(2.0))
    assert P.dry_penalty(1000, big) == 0.8 * 2.0**cap and math.isfinite(0.8 * 2.0**cap)
    assert P.dry_penalty(2 + cap - 1, big) == 0.8 * 2.0 ** (cap - 1)
    flat = SamplingParams(**{**DRY, "dry_base": 1.0})
    assert P.dry_penalty(10_000, flat) == 0.8
    near = SamplingParams(**{**DRY, "dry_base": 1.0000005})  # below llama.cpp's 1.000001
    assert P.dry_penalty(100, near) == pytest.approx(0.8 * 1.0000005**98)


def test_dry_applies_per_row_on_the_right_tokens():
    params = SamplingParams(**DRY)
    logits = torch.zeros(2, 20, dtype=torch.bfloat16)
    history = [[1, 2, 3, 4, 1, 2, 3], [5, 6, 9, 5, 6]]
    out = P.apply_dry(logits, history, params, DryBreakers.from_sequences([]))
    want = torch.zeros(2, 20)
    want[0, 4] = -0.8 * 1.75
    want[1, 9] = -0.8
    assert out.dtype == torch.float32 and torch.allclose(out, want)
    # As a (B, T) tensor, over the last n tokens only.
    window = SamplingParams(**DRY, dry_penalty_last_n=5)
    rows = torch.tensor([[1, 2, 3, 4, 1, 2, 3], [0, 0, 0, 5, 6, 5, 6]])
    out = P.apply_dry(logits, rows, window, DryBreakers.from_sequences([]))
    # Row 0 sees "3 4 1 2 3": "3" repeats, under 2 long. Row 1 "0 5 6 5 6": "5 6" was
    # followed by 5.
    want = torch.zeros(2, 20)
    want[1, 5] = -0.8
    assert torch.equal(out, want)
    assert P.apply_dry(logits, None, params) is logits


def test_dry_ignores_followers_past_the_vocabulary():
    params = SamplingParams(**DRY)
    logits = torch.zeros(1, 5)
    out = P.apply_dry(logits, [[1, 2, 7, 1, 2, 3, 1, 2]], params, DryBreakers.from_sequences([]))
    assert torch.equal(out, torch.tensor([[0.0, 0.0, 0.0, -0.8, 0.0]]))


def test_a_bias_on_the_token_just_past_the_vocabulary_is_ignored():
    logits = torch.zeros(1, 3)
    assert P.apply_logit_bias(logits, {3: 1.0}) is logits
    assert P.apply_logit_bias(logits, {2: 1.0, 3: 1.0}).tolist() == [[0.0, 0.0, 1.0]]


def test_the_dry_exponent_cap_follows_llama_cpp_for_every_base():
    """llama.cpp: ``max_exponent = FLOAT_MAX_LOG / log(base)`` when base > 1.000001, and
    the exponent is clamped only when that cap is > 0."""

    def penalty(length, base):
        return P.dry_penalty(length, SamplingParams(**{**DRY, "dry_base": base}))

    cap = int(88.7228391 / math.log(1.75))  # 158 at the default base
    assert penalty(1000, 1.75) == 0.8 * 1.75**cap
    assert penalty(2 + cap, 1.75) == 0.8 * 1.75**cap
    assert penalty(1 + cap, 1.75) == 0.8 * 1.75 ** (cap - 1)
    assert int(88.7228391 / math.log(1e20)) == 1 and penalty(7, 1e20) == 0.8 * 1e20
    # A base so large the cap comes out 0: no clamp at all (as llama.cpp).
    assert int(88.7228391 / math.log(1e39)) == 0 and penalty(4, 1e39) == 0.8 * 1e39**2


def test_a_two_token_breaker_cuts_only_where_its_tail_follows():
    history = [7, 11, 12, 13, 20, 7, 11, 12]  # "7 11 12" repeats; 7 is not followed by 10
    params = SamplingParams(**DRY)
    two = DryBreakers.from_sequences([[7, 10]])
    assert P.dry_repeat_lengths(history, params, two) == {13: 3}
    assert P.dry_repeat_lengths(history, params, DryBreakers.from_sequences([[7]])) == {13: 2}


def test_dry_reads_a_history_tensor_like_a_list():
    params = SamplingParams(**DRY)
    history = [1, 2, 3, 4, 1, 2, 3]
    assert P.dry_repeat_lengths(torch.tensor([history]), params) == {4: 3}
    assert P.dry_repeat_lengths(torch.tensor(history), params) == {4: 3}
    assert P.dry_repeat_lengths(history, params) == {4: 3}


def test_a_frequency_penalty_of_one_alone_applies():
    out = P.apply_penalties(torch.zeros(1, 3), [[1, 1, 2]], SamplingParams(frequency_penalty=1.0))
    assert out.tolist() == [[0.0, -2.0, -1.0]]


def test_dry_ignores_a_follower_equal_to_the_vocabulary_size():
    params = SamplingParams(**DRY)
    logits = torch.zeros(1, 5)
    out = P.apply_dry(logits, [[1, 2, 5, 1, 2]], params, DryBreakers.from_sequences([]))
    assert out is logits
