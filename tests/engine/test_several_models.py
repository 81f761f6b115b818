"""Several models in one tree (``engine.loom.registry``): attach, use, generate with a named
model, the tokenizer rule, and node KV kept by one local runner only.

The two tiny models (a RoPE Llama and an absolute-position GPT-2) share one tokenizer,
so they may share a tree; each one's output is checked against a loom of that model
alone, and the KV owner's node KV against a full recompute."""

from __future__ import annotations

import pytest
import torch

from loomterm.engine.local.runner import LocalRunner
from loomterm.engine.loom.registry import slug, vocab_key, vocab_mismatch
from loomterm.engine.models.load import load_model
from loomterm.errors import InputError
from loomterm.tree import Origin
from tests.helpers import ForwardCounter, assert_matches_recompute, make_loom, reference_logits
from tests.tiny_models import build_tiny_llama, build_tokenizer


def runner_of(folder) -> LocalRunner:
    return LocalRunner(load_model(str(folder), device="cpu", dtype="float32"))


@pytest.fixture
def pair(tiny_llama_dir, tiny_gpt2_dir):
    """A loom on the Llama with the GPT-2 attached as "g"."""
    loom = make_loom(tiny_llama_dir)
    # The prompts end in a word: healing (its own tests: test_healing.py) would start
    # the children before the prompt's last tokens, which these tests compare with.
    loom.update_settings(temperature=0.0, token_healing="off")
    key = loom.attach("g", runner_of(tiny_gpt2_dir))
    assert key == "g"
    return loom


def test_one_model_nodes_carry_its_key_and_the_table_names_it(tiny_llama_dir):
    loom = make_loom(tiny_llama_dir)
    prompt = loom.append(loom.root, "Once upon a time")
    [kid] = loom.generate(prompt, 4, temperature=0.0, token_healing="off")
    key = loom.active_model
    assert key == slug(loom.runner.name) and list(loom.models) == [key]
    assert kid.meta["model"] == key and "model" not in prompt.meta  # typed text: no model
    record = loom.model_table[key]
    assert record["kind"] == "local" and record["fingerprint"]["weights"]
    assert record["precision"] == "float32"
    head = loom.truncate(kid, prompt.end + 2)  # a split keeps who wrote both halves
    assert head.meta["model"] == key and kid.meta["model"] == key


def test_each_model_writes_what_it_would_write_alone(pair, tiny_llama_dir, tiny_gpt2_dir):
    prompt = pair.append(pair.root, "Once upon a time there")
    mine = pair.generate(prompt, 6, n=2, seed=5)
    theirs = pair.generate(prompt, 6, n=2, seed=5, model="g")
    assert [k.meta["model"] for k in mine + theirs] == [pair.active_model] * 2 + ["g"] * 2
    for folder, kids in ((tiny_llama_dir, mine), (tiny_gpt2_dir, theirs)):
        alone = make_loom(folder)
        base = alone.append_tokens(alone.root, prompt.tokens)
        again = alone.generate(base, 6, n=2, seed=5, temperature=0.0)
        assert [k.tokens for k in again] == [k.tokens for k in kids]
        for kid, other in zip(kids, again):
            assert kid.logprobs == pytest.approx(other.logprobs, abs=1e-4)
    assert mine[0].tokens != theirs[0].tokens  # two models, two texts


def test_the_second_local_model_never_touches_node_kv(pair, tiny_gpt2_dir):
    gpt2 = pair.models["g"]
    assert not gpt2.capabilities.node_kv and not gpt2.capabilities.rerope
    assert pair.kv_owner == pair.active_model
    prompt = pair.append(pair.root, "Once upon a time")
    kv_before = prompt.kv.clone()
    [kid] = pair.generate(prompt, 5, model="g")
    assert kid.kv is None  # the GPT-2's KV stayed in its own working cache
    assert torch.equal(prompt.kv, kv_before)
    # Continuing the GPT-2's text with the Llama is exact for the Llama...
    [more] = pair.generate(kid, 3)
    assert_matches_recompute(pair, more)
    # ...and the GPT-2 reuses its working cache by common prefix, exactly.
    pair.use("g")
    with ForwardCounter(pair) as counter:
        logits = pair.next_logits(kid)
    assert counter.tokens <= 1  # it had the path: at most the last token again
    want = reference_logits(pair, pair.tokens(kid))
    assert (logits - want).abs().max() / want.abs().max() < 1e-4
    # A splice under the GPT-2 is exact (it cannot move node KV it does not own).
    edited = pair.splice(kid, 1, 2, " Twice")
    assert pair.is_exact(edited)
    assert (
        pair.next_logits(edited) - reference_logits(pair, pair.tokens(edited))
    ).abs().max() < 1e-3


def test_use_switches_what_operations_run_on(pair):
    llama = pair.active_model
    pair.use("g")
    assert pair.active_model == "g" and pair.runner is pair.models["g"]
    prompt = pair.append(pair.root, "Hello")
    [kid] = pair.generate(prompt, 3)
    assert kid.meta["model"] == "g"
    pair.use(llama)
    [other] = pair.generate(prompt, 3)
    assert other.meta["model"] == llama
    with pytest.raises(InputError, match="no model 'nope' is attached"):
        pair.use("nope")
    with pytest.raises(InputError, match="no model 'nope'"):
        pair.generate(prompt, 3, model="nope")


def test_a_model_with_another_tokenizer_is_refused_in_one_line(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    other = build_tiny_llama(tmp_path / "other", seed=3)
    build_tokenizer(320).save_pretrained(other)  # same architecture, another vocabulary
    with pytest.raises(InputError) as caught:
        loom.attach("o", runner_of(other))
    message = str(caught.value)
    assert "\n" not in message and "cannot join this tree" in message
    assert "vocabulary has 3" in message and "384" in message
    assert list(loom.models) == [loom.active_model]  # nothing changed


def test_the_tokenizer_rule(tiny_llama_dir, tiny_gpt2_dir, tmp_path):
    a, b = vocab_key(runner_of(tiny_llama_dir)), vocab_key(runner_of(tiny_gpt2_dir))
    assert vocab_mismatch(a, b) is None and a["table"] and a["size"] == 384
    assert vocab_mismatch(a, {**b, "probe": "x"}) == "it tokenizes the same text into other ids"
    assert vocab_mismatch(a, {**b, "table": "x"}) == "its token table differs"
    assert vocab_mismatch(a, {**b, "table": None}) is None  # a server: the probe must do


def test_a_generated_pick_and_a_splice_keep_the_writer(pair):
    prompt = pair.append(pair.root, "Once upon a time")
    [kid] = pair.generate(prompt, 4, model="g")
    holder_top = kid.top[1]
    token = holder_top[1][0]
    picked = pair.pick(kid, prompt.end + 1, token)
    assert picked.origin is Origin.MODEL and picked.meta["model"] == "g"
    edited = pair.splice(kid, 0, 1, "Twice")
    copies = [n for n in edited.path() if n.origin is Origin.MODEL]
    assert copies and all(n.meta["model"] == "g" for n in copies)


def test_attach_twice_and_detach(pair, tiny_gpt2_dir):
    with pytest.raises(InputError, match="already attached as g"):
        pair.attach("h", pair.models["g"])
    key = pair.attach(None, runner_of(tiny_gpt2_dir))
    assert key != "g" and key in pair.models  # a fresh key from the model's name
    pair.detach(key)
    assert key not in pair.models and key in pair.model_table  # recorded still
    with pytest.raises(InputError, match="active model"):
        pair.detach(pair.active_model)


def test_kv_bytes_count_every_model_once(pair):
    prompt = pair.append(pair.root, "Once upon a time")
    pair.generate(prompt, 4, model="g")
    memory = pair.kv_bytes()
    owner = pair.models[pair.kv_owner].kv_bytes()
    assert memory.nodes == owner.nodes and memory.working > owner.working


def test_siblings_from_several_models_at_once(pair):
    prompt = pair.append(pair.root, "Once upon a time")
    seen = []
    kids = pair.generate(
        prompt,
        4,
        models=[("g", 2), (pair.active_model, 1)],
        seed=1,
        meta={"blind": 7},
        on_token=lambda node, token, piece: seen.append(node.id),
    )
    assert [k.meta["model"] for k in kids] == ["g", "g", pair.active_model]
    assert all(k.meta["blind"] == 7 for k in kids) and prompt.children == kids
    assert set(seen) == {k.id for k in kids}
    # The same as asking each model on its own, with the seed going up per entry.
    alone = pair.generate(prompt, 4, 2, seed=1, model="g")
    assert [k.tokens for k in alone] == [k.tokens for k in kids[:2]]
    with pytest.raises(InputError, match="counts >= 0"):
        pair.generate(prompt, 4, models=[("g", -1)])


def test_tidying_the_tree_keeps_every_model_exact(pair):
    llama = pair.active_model
    prompt = pair.append(pair.root, "Once upon a time")
    [kid] = pair.generate(prompt, 6, model="g")
    [other] = pair.generate(prompt, 4)
    pair.use("g")

    def exact_for_g(node) -> None:
        want = reference_logits(pair, pair.tokens(node))
        assert (pair.next_logits(node) - want).abs().max() / want.abs().max() < 1e-4

    exact_for_g(kid)  # the GPT-2's working cache now holds this path
    pair.split(kid, 3)  # both working caches hear of the split
    exact_for_g(kid)
    pair.merge(kid)  # and of the merge
    exact_for_g(kid)
    pair.move(other, kid)  # and of the move
    exact_for_g(other)
    pair.use(llama)
    assert_matches_recompute(pair, other)
    assert_matches_recompute(pair, kid)
