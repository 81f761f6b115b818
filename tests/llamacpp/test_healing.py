"""Token healing on the llama.cpp runner (the default model's GGUF): the healed tokens
spell the typed text again, their recorded log-probabilities are a fresh llama.cpp
evaluation's renormalised over the allowed tokens, and healing off is untouched."""

from __future__ import annotations

import math

import pytest
import torch

from loomterm.engine import Loom
from loomterm.engine.sample.healing import Heal, HealState
from loomterm.engine.text_prefix import prefix_index
from loomterm.tree import Origin
from tests.llamacpp.conftest import THREADS

TYPED = "The old lighthou"
NATS = 0.05  # llama.cpp's batched and fresh evaluations round apart (conftest: EXACT_KL)


@pytest.fixture
def loom(binding, default_gguf) -> Loom:
    loom = Loom.load(model=str(default_gguf), backend="llama.cpp", n_ctx=1024, threads=THREADS)
    assert loom.settings.token_healing  # on by default
    yield loom
    loom.runner.close()


def test_heal_spells_the_typed_word_and_records_masked_logprobs(loom, fresh):
    assert loom.capabilities.healing
    node = loom.append(loom.root, TYPED)
    typed_tokens = list(node.tokens)
    kids = loom.generate(node, 6, n=2, temperature=0)
    head = kids[0].parent
    assert head is not node and node.parent is head  # the old spelling: a sibling
    assert head.tokens + node.tokens == typed_tokens and node.origin == Origin.USER
    assert loom.text(node) == TYPED
    index = prefix_index(loom.codec, loom.runner.vocab_size)
    for kid in kids:
        assert loom.text(kid).startswith(TYPED)
        heal = HealState.start(Heal(kid.meta["healed"].encode(), 0, index), 1)
        path = head.path_tokens()
        for step, token in enumerate(kid.tokens):
            if not heal.pending:
                break
            masked = heal.constrain(fresh.logits(path).float()[None], 6 - step)
            want = torch.log_softmax(masked, -1)[0]
            assert want[token] > -math.inf  # an allowed token
            assert kid.logprobs[step] == pytest.approx(float(want[token]), abs=NATS)
            assert all(lp > -math.inf for _, lp in kid.top[step])
            heal = heal.after([token])
            path.append(token)
        assert not heal.pending


def test_heal_off_continues_the_typed_tokens(loom, fresh):
    node = loom.append(loom.root, TYPED)
    kid = loom.generate(node, 3, temperature=0, token_healing="off")[0]
    assert kid.parent is node and "healed" not in kid.meta
    logits = fresh.logits(node.path_tokens())
    best = int(logits.argmax())
    assert kid.tokens[0] == best or float(logits[best] - logits[kid.tokens[0]]) < 0.05


def test_heal_not_after_a_space(loom):
    node = loom.append(loom.root, "The old ")
    kid = loom.generate(node, 3, temperature=0)[0]
    assert kid.parent is node and "healed" not in kid.meta
