"""Token healing (``sample.healing``, ``loom.healing``, ``text_prefix``): the first
generated tokens spell the backed-up typed text again, exactly, and the tree keeps the
writer's text and its old spelling."""

from __future__ import annotations

import math
import threading

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomterm.engine.loom.healing import MAX_TOKENS, plan_heal, typed_tail
from loomterm.engine.sample.healing import Heal, HealState
from loomterm.engine.text_prefix import TokenPrefixIndex, healed_count, prefix_index
from loomterm.tree import Origin
from tests.helpers import reference_logits
from tests.tiny_models import CORPUS


def test_healing_is_auto_by_default(loom):
    """A new loom heals where the model expects the word to go on (the setting's
    default; the real model's test is in test_default_model), and the runner can."""
    from loomterm.config.settings import DEFAULTS

    assert DEFAULTS.token_healing == "auto" and loom.capabilities.healing


@pytest.fixture(autouse=True)
def healing_on(request):
    """The tests below check how healing works, not when ``auto`` heals: on, so that
    every typed word's end is healed (the tiny models' guesses are random)."""
    for name in ("loom", "llama_loom"):
        if name in request.fixturenames:
            request.getfixturevalue(name).update_settings(token_healing="on")


VOCAB = [
    b"",
    b" ",
    b" l",
    b" light",
    b" lighthouse",
    b"igh",
    b"ighth",
    b"ou",
    b"ouse",
    b"e",
    b"The",
    b".",
]


@pytest.fixture
def index() -> TokenPrefixIndex:
    return TokenPrefixIndex(VOCAB)


# -- the vocabulary by its bytes --------------------------------------------------------------
def test_tokens_starting_with_a_prefix(index):
    assert sorted(index.starting_with(b" light")) == [3, 4]
    assert index.starting_with(b" lighthouses") == []
    assert index.extends(b" light") and not index.extends(b" lighthouse")
    assert 0 not in index.starting_with(b"")  # a token of no text spells nothing


def test_a_lone_space_before_a_word_is_not_a_prefix(index):
    assert index.prefixes_of(b" lighth") == [(2, 2), (3, 6)]  # " l", " light"; not " "
    assert index.prefixes_of(b"  x") == [(1, 1)]  # a space before a space is a cut


def test_the_fewest_tokens_that_spell_a_text(index):
    assert index.cover_steps(b"") == 0
    assert index.cover_steps(b" lighth") == 1  # " lighthouse" covers it and goes on
    assert index.cover_steps(b"ighthou") == 2  # "ighth" + "ou"/"ouse"
    assert index.cover_steps(b"xyz") > 1000


def test_allowed_tokens_leave_room_to_finish(index):
    assert sorted(index.allowed(b" lighthou", 1)) == [4]  # only a token that covers it
    # " l" + "ighth" + "ou"; not " light": no token spells the "hou" left after it.
    assert sorted(index.allowed(b" lighthou", 3)) == [2, 4]
    assert sorted(index.allowed(b" lighthou", 2)) == [4]  # " l" would need two more


# -- the mask and the state ---------------------------------------------------------------------
def test_the_mask_follows_each_row(index):
    heal = Heal(b" lighthou", 2, index)
    state = HealState.start(heal, 2)
    logits = torch.zeros(2, len(VOCAB))
    masked = state.constrain(logits, 3)
    assert torch.equal(torch.isfinite(masked[0]), torch.isfinite(masked[1]))
    assert {i for i in range(len(VOCAB)) if masked[0, i] > -math.inf} == {2, 4}
    state = state.after([2, 4])  # " l" leaves "ighthou"; " lighthouse" spells it all
    assert state.remaining == (b"ighthou", b"")
    masked = state.constrain(logits, 2)
    assert torch.isfinite(masked[1]).all()  # a row that is done samples freely
    assert not torch.isfinite(masked[0]).all()
    done = state.after([0, 5])  # nothing allowed was taken: never pending forever
    assert not done.pending
    assert HealState.start(None, 3).constrain(logits, 1) is logits


def test_healed_count():
    assert healed_count([b" l", b"ighth", b"ouse", b" stood"], b" lighthou") == 3
    assert healed_count([b" lighthouse"], b" lighthou") == 1
    assert healed_count([b" light"], b" lighthou") == 0


# -- what is backed up ----------------------------------------------------------------------------
def test_plan_backs_up_the_word(index):
    tail = [b"The", b" l", b"ighth", b"ou"]
    plan = plan_heal(tail, index, 8)
    assert plan is not None and plan.tokens == 3 and plan.text == b" lighthou"


def test_plan_backs_up_less_when_the_generation_is_short(index):
    plan = plan_heal([b"The", b" l", b"ighth", b"ou"], index, 1)
    assert plan is not None and plan.text == b" lighthou"  # " lighthouse" does it in one
    assert plan_heal([b"ighth", b"ou"], index, 0) is None


def test_plan_never_backs_up_a_token_that_holds_more_than_the_word(index):
    """A tokenizer may merge a phrase ("Once upon a tim"): the word goes on across its
    end, but backing it up would redo the words before; only "e" is backed up (the
    bos tokenizer's test in the editor, test_bos_editor, found this)."""
    plan = plan_heal([b"Once upon a tim", b"ou"], index, 8)
    assert plan is not None and plan.tokens == 1 and plan.text == b"ou"
    plan = plan_heal([b"The", b" l", b"ighth", b"ou"], index, 8)
    assert plan is not None and plan.tokens == 3  # a leading space is the word's own


@pytest.mark.parametrize("tail", [[b"The", b" "], [b"The", b"."], [b"The", b" lighthouse"]])
def test_no_plan_after_a_space_punctuation_or_an_unextendable_token(index, tail):
    assert plan_heal(tail, index, 8) is None


# -- in the loom ------------------------------------------------------------------------------------
PROMPTS = [
    "Once upon a time, in a land far away, there lived a wea",
    "The quick brown fox ju",
    "Language models predict the next to",
    "User: hello there\nAssistant: hi, how can I he",
]


def healable(loom) -> tuple[str, object]:
    """A typed node whose generation heals (the tiny tokenizer decides which)."""
    index = prefix_index(loom.codec, loom.runner.vocab_size)
    for text in PROMPTS:
        node = loom.append(loom.root, text)
        tail = [loom.codec.token_bytes(t) for t in typed_tail(node, MAX_TOKENS)]
        if plan_heal(tail, index, 8) is not None:
            return text, node
    raise AssertionError("no prompt heals on this tokenizer")


def test_healed_text_starts_with_exactly_the_typed_text(loom):
    text, node = healable(loom)
    old_tokens, old_id = list(node.tokens), node.id
    kids = loom.generate(node, 6, n=3, temperature=1.0, seed=3)
    assert len(kids) == 3
    for kid in kids:
        assert loom.text(kid).startswith(text)
        assert kid.meta["healed"] and text.endswith(kid.meta["healed"])
        assert kid.parent is not node  # started before the backed-up tokens
        count = healed_count(
            [loom.codec.token_bytes(t) for t in kid.tokens], kid.meta["healed"].encode()
        )
        assert count >= 1
    # Nothing lost: the typed node was split (``truncate``) before the backed-up tokens;
    # its tail keeps the old spelling, the writer's text, as a sibling of the children.
    typed = loom.tree.nodes[old_id]
    assert typed is node and typed.origin == Origin.USER
    assert loom.text(typed) == text
    head = kids[0].parent
    assert typed.parent is head and all(kid.parent is head for kid in kids)
    assert head.tokens + typed.tokens == old_tokens and head.origin == Origin.USER
    spelled = b"".join(loom.codec.token_bytes(t) for t in typed.tokens)
    assert spelled == kids[0].meta["healed"].encode()


def test_healed_logprobs_equal_a_recompute_under_the_mask(loom):
    """Recorded log-probabilities are renormalised over the allowed tokens: the
    log-softmax of the reference logits with every other token at -inf."""
    text, node = healable(loom)
    kid = loom.generate(node, 5, temperature=0)[0]
    typed = kid.meta["healed"].encode()
    index = prefix_index(loom.codec, loom.runner.vocab_size)
    heal = HealState.start(Heal(typed, 0, index), 1)
    path = kid.parent.path_tokens()
    for step, token in enumerate(kid.tokens):
        logits = reference_logits(loom, path).float()[None]  # (1, V)
        masked = heal.constrain(logits, 5 - step)
        want = torch.log_softmax(masked, -1)[0]
        assert int(want.argmax()) == token  # greedy under the mask
        assert kid.logprobs[step] == pytest.approx(float(want[token]), abs=2e-4)
        for alt, logprob in kid.top[step]:
            assert logprob == pytest.approx(float(want[alt]), abs=2e-4)
            assert logprob > -math.inf
        heal = heal.after([token])
        path.append(token)
    assert not heal.pending


def test_healing_off_is_todays_generation(loom):
    text, node = healable(loom)
    kid = loom.generate(node, 4, temperature=0, token_healing="off")[0]
    assert kid.parent is node and "healed" not in kid.meta
    path = node.path_tokens()
    for step, token in enumerate(kid.tokens):
        logits = reference_logits(loom, path)
        assert token == int(logits.argmax())
        assert kid.logprobs[step] == pytest.approx(
            float(torch.log_softmax(logits.float(), -1)[token]), abs=2e-4
        )
        path.append(token)


@pytest.mark.parametrize("text", ["The quick brown fox ", "The quick brown fox.", "hello world\n"])
def test_text_ending_in_a_space_or_punctuation_is_not_healed(loom, text):
    node = loom.append(loom.root, text)
    kid = loom.generate(node, 3, temperature=0)[0]
    assert kid.parent is node and "healed" not in kid.meta


def test_a_complete_token_that_no_longer_token_extends_is_not_healed(loom):
    index = prefix_index(loom.codec, loom.runner.vocab_size)
    whole = next(
        t
        for t in range(loom.runner.vocab_size)
        if (b := loom.codec.token_bytes(t))
        and b[-1:].isalpha()
        and b[:1] == b" "
        and not index.extends(b)
    )
    node = loom.append_tokens(loom.root, loom.encode("The") + [whole])
    kid = loom.generate(node, 3, temperature=0)[0]
    assert kid.parent is node and "healed" not in kid.meta


def test_model_text_is_not_healed(loom):
    text, node = healable(loom)
    kid = loom.generate(node, 3, temperature=0, token_healing="off")[0]
    again = loom.generate(kid, 3, temperature=0)[0]
    assert again.parent is kid


@pytest.mark.parametrize("drafting", ["off", "tree"])
def test_a_cancelled_generation_still_spells_the_typed_text(loom, drafting):
    text, node = healable(loom)
    cancel = threading.Event()
    kids = loom.generate(
        node, 8, temperature=0, cancel=cancel, drafting=drafting, on_token=lambda *_: cancel.set()
    )
    assert kids, "healing finishes the typed text before it stops"
    for kid in kids:
        assert loom.text(kid).startswith(text)
        assert len(kid.tokens) == healed_count(
            [loom.codec.token_bytes(t) for t in kid.tokens], kid.meta["healed"].encode()
        )


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_cut_of_the_corpus_keeps_the_typed_text(llama_loom, data):
    line = data.draw(st.sampled_from(CORPUS))
    cut = data.draw(st.integers(min_value=1, max_value=len(line)))
    text = line[:cut]
    loom = llama_loom
    node = loom.append(loom.root, text)
    tokens = list(node.tokens)
    seed = data.draw(st.integers(0, 1000))
    new = data.draw(st.integers(1, 5))
    kids = loom.generate(node, new, n=2, temperature=1.0, seed=seed)
    for kid in kids:
        assert loom.text(kid).startswith(text)
        assert len(kid.tokens) <= new
    assert node.path_tokens()[-len(node.tokens) :] == node.tokens
    assert loom.text(node) == text  # the writer's node reads the same
    assert loom.tree.nodes[node.id].tokens == tokens[len(tokens) - len(node.tokens) :]


def test_servers_say_why_they_do_not_heal():
    from loomterm.engine.remote.runner import WHY_NOT
    from loomterm.engine.runner import Capabilities

    capabilities = Capabilities(why_not=WHY_NOT)
    assert not capabilities.healing and "logit_bias" in capabilities.reason("healing")


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_drafted_healing_is_plain_healing(llama_loom, temperature):
    """Drafting stays exact with healing: the same tokens and records, seed for seed."""
    loom = llama_loom
    text, node = healable(loom)
    assert loom.capabilities.drafting
    for seed in range(3):
        plain = loom.generate(node, 12, temperature=temperature, seed=seed, drafting="off")[0]
        drafted = loom.generate(node, 12, temperature=temperature, seed=seed, drafting="tree")[0]
        assert loom.last_result.drafting is not None  # it did draft
        assert drafted.tokens == plain.tokens and drafted.parent is plain.parent
        assert drafted.logprobs == pytest.approx(plain.logprobs, abs=1e-4)
        assert [t for t, _ in drafted.top[0]] == [t for t, _ in plain.top[0]]
        assert loom.text(drafted).startswith(text)


def test_a_printed_prompt_is_continued_without_repeating_the_healed_word(loom):
    from loomterm.engine.text_prefix import AfterTyped

    text, node = healable(loom)
    pieces: list[str] = []
    kid = loom.generate(
        node, 6, temperature=0, on_token=AfterTyped(lambda n, t, p: pieces.append(p))
    )[0]
    assert kid.meta["healed"]
    assert text + "".join(pieces) == loom.text(kid)
