"""Every sampler reaches generation through the Loom: by name, from the settings, per
row in a batch, seed-reproducible, recorded on the node, exact with drafting; and
banned phrases never appear, going back without re-running the prompt."""

from __future__ import annotations

import pytest

from loomterm.config.settings import Settings
from loomterm.engine.decode.banned import PhraseWatch
from tests.helpers import ForwardCounter, assert_matches_recompute

PROMPT = "The weaver sat at the loom and the loom sang, and the weaver sang with the loom."

EVERY_SAMPLER = dict(
    temperature=0.9,
    top_k=30,
    top_p=0.95,
    min_p=0.02,
    typical_p=0.9,
    repetition_penalty=1.1,
    presence_penalty=0.2,
    frequency_penalty=0.1,
    penalty_last_n=64,
    dry_multiplier=0.8,
    dry_allowed_length=2,
    xtc_probability=0.5,
    xtc_threshold=0.1,
    dynatemp_range=0.3,
    logit_bias={"7": -1.0},
)


def test_every_sampler_setting_is_a_generate_keyword(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 6, seed=1, **EVERY_SAMPLER)
    for name, value in EVERY_SAMPLER.items():
        if name != "logit_bias":
            assert kid.sampling[name] == value, name
    assert kid.sampling["logit_bias"] == {"7": -1.0}
    loom.update_settings(mirostat=2, mirostat_tau=3.0)
    (kid,) = loom.generate(node, 6, seed=1)
    assert kid.sampling["mirostat"] == 2 and kid.sampling["mirostat_tau"] == 3.0
    assert_matches_recompute(loom, kid)


@pytest.mark.parametrize("extra", [{}, {"mirostat": 2}])
def test_a_seed_gives_each_row_the_same_text_whatever_n(llama_loom, extra):
    loom = llama_loom
    loom.update_settings(drafting="off")
    node = loom.append(loom.root, PROMPT)
    knobs = {**EVERY_SAMPLER, **extra}
    four = loom.generate(node, 10, n=4, seed=9, **knobs)
    two = loom.generate(node, 10, n=2, seed=9, **knobs)
    assert [k.tokens for k in four[:2]] == [k.tokens for k in two]
    assert len({tuple(k.tokens) for k in four}) > 1  # rows draw their own streams


@pytest.mark.parametrize("extra", [{}, {"mirostat": 2}])
def test_drafting_keeps_the_text_seed_for_seed_with_every_sampler(llama_loom, extra):
    loom = llama_loom
    node = loom.append(loom.root, PROMPT)
    knobs = {**EVERY_SAMPLER, **extra}
    (first,) = loom.generate(node, 24, seed=4, drafting="off", **knobs)
    (plain,) = loom.generate(node, 24, seed=5, drafting="off", **knobs)
    (drafted,) = loom.generate(node, 24, seed=5, drafting="tree", **knobs)
    assert loom.last_result.drafting is not None  # it really drafted (from ``first``)
    assert drafted.tokens == plain.tokens
    assert_matches_recompute(loom, drafted)


def test_logit_bias_never_by_text_forbids_its_tokens(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, PROMPT)
    banned = loom.encode(" loom")
    kids = loom.generate(node, 30, n=4, seed=2, logit_bias={" loom": "never"})
    for kid in kids:
        assert not set(banned) & set(kid.tokens)


def test_dry_reads_typed_text(llama_loom):
    """DRY penalises continuing a repeat of the typed prompt; with it off the greedy
    continuation repeats, with it on it does not repeat the same run."""
    loom = llama_loom
    node = loom.append(loom.root, "a b c d e f a b c d e f a b c d e f a b c")
    (plain,) = loom.generate(node, 12, temperature=0)
    (dry,) = loom.generate(node, 12, temperature=0, dry_multiplier=5.0, dry_allowed_length=1)
    assert plain.tokens != dry.tokens


# -- banned phrases ----------------------------------------------------------------------


def test_phrase_watch_finds_a_phrase_across_tokens():
    watch = PhraseWatch(("the loom", "the lo"), ignore_case=False)
    for piece in ("and", " th", "e l", "o"):
        watch.push(piece)
    assert watch.found() == 1  # "the lo" begins in " th", the second token
    watch.take_back(1, 42)
    assert watch.text == "and" and watch.forbidden == {1: {42}}
    caseless = PhraseWatch(("LOOM",), ignore_case=True)
    caseless.push("a Lo")
    assert caseless.found() is None
    caseless.push("om")
    assert caseless.found() == 0


def _greedy_text(loom, node, count):
    (kid,) = loom.generate(node, count, temperature=0)
    return loom.decode(kid.tokens), kid


def test_a_banned_phrase_never_appears_and_the_prompt_is_not_run_again(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, PROMPT)
    text, _ = _greedy_text(loom, node, 40)
    # Ban something the model really writes, spanning a token boundary.
    tokens = loom.encode(text)
    # Two tokens' text less its first character, whole characters only (a replacement
    # character stands for any broken bytes, so it cannot name a phrase).
    spans = (loom.decode(tokens[i : i + 2])[1:] for i in range(2, len(tokens) - 1))
    phrase = next(p for p in spans if len(p) >= 2 and "\ufffd" not in p and p in text)
    taken_back = []
    with ForwardCounter(loom) as counter:
        (kid,) = loom.generate(
            node,
            40,
            temperature=0,
            banned_strings=(phrase,),
            on_take_back=lambda child, length: taken_back.append(length),
        )
    out = loom.decode(kid.tokens)
    assert phrase not in out
    assert taken_back, "the phrase came and was taken back"
    assert counter.tokens == counter.calls  # one token per forward: never the prompt again
    assert kid.sampling["banned_strings"] == [phrase]
    assert_matches_recompute(loom, kid)


def test_banned_phrases_sharing_a_prefix_in_batched_siblings(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, PROMPT)
    text, _ = _greedy_text(loom, node, 30)
    words = [w for w in text.split() if len(w) > 2][:2]
    phrases = tuple(words) + tuple(w[:-1] for w in words)  # "loom" and "loo"
    kids = loom.generate(node, 30, n=3, temperature=1.0, seed=3, banned_strings=phrases)
    assert len(kids) == 3
    for kid in kids:
        out = loom.decode(kid.tokens)
        assert not any(p in out for p in phrases), (out, phrases)
        assert_matches_recompute(loom, kid)
    again = loom.generate(node, 30, n=1, temperature=1.0, seed=3, banned_strings=phrases)
    assert again[0].tokens == kids[0].tokens  # row 0 of seed 3, whatever n


def test_banned_phrases_ignoring_case(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, PROMPT)
    text, _ = _greedy_text(loom, node, 30)
    word = next(w for w in text.split() if len(w) > 2)
    (kid,) = loom.generate(
        node, 30, temperature=0, banned_strings=(word.upper(),), banned_strings_ignore_case=True
    )
    assert word.casefold() not in loom.decode(kid.tokens).casefold()


def test_banned_phrases_are_a_setting():
    settings = Settings().replace(banned_strings=["as an AI"], banned_strings_ignore_case=True)
    assert settings.banned_strings == ("as an AI",)
    assert Settings.from_stored(settings.as_dict()) == (settings, [])
