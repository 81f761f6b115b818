"""The llama.cpp runner on the default model's GGUF: every tree operation checked against
a fresh llama.cpp evaluation of the resulting path (``Fresh``), and what it cost (tokens
llama.cpp evaluated) where the point of the operation is to cost little."""

from __future__ import annotations

import pytest
import torch

from loomterm.engine import Loom
from loomterm.errors import InputError
from tests.llamacpp.conftest import EXACT_KL, THREADS, kl

PROMPT = "The history of the printing press begins"


def new_loom(gguf) -> Loom:
    return Loom.load(model=str(gguf), backend="llama.cpp", n_ctx=1024, threads=THREADS)


@pytest.fixture
def loom(binding, default_gguf) -> Loom:
    loom = new_loom(default_gguf)
    yield loom
    loom.runner.close()


def seeded_twice(loom: Loom, gguf, **kwargs) -> tuple[list, list]:
    """The same seeded generation on ``loom`` and on a fresh loom in the same state (a
    fresh llama.cpp cache: a cache holding other sequences rounds a little differently,
    which can move a sampled token)."""
    kids = loom.generate(loom.append(loom.root, PROMPT), **kwargs)
    twin = new_loom(gguf)
    try:
        again = twin.generate(twin.append(twin.root, PROMPT), **kwargs)
        return [k.tokens for k in kids], [k.tokens for k in again]
    finally:
        twin.runner.close()


def exact(loom: Loom, node, fresh) -> float:
    """KL of the runner's next-token logits to a fresh evaluation; asserts it is exact."""
    assert loom.is_exact(node)
    got = loom.next_logits(node)
    value = kl(fresh.logits(node.path_tokens()), got)
    assert value < EXACT_KL, f"KL {value:.4f} to a fresh evaluation"
    return value


def evaluated(loom: Loom) -> int:
    return loom.runner.llama.evaluated


def test_the_binding_is_the_built_one(binding, llama_build):
    from loomterm.engine.llamacpp.binding import library_path

    assert library_path(binding).startswith(str(llama_build / "lib"))
    import llama_cpp

    assert llama_cpp.__version__ == "0.3.36"


def test_append_generate_and_capabilities(loom, fresh):
    node = loom.append(loom.root, PROMPT)
    assert node.tokens == fresh.llama.tokenize(PROMPT, True)
    exact(loom, node, fresh)
    caps = loom.capabilities
    assert caps.full_logits and caps.batched_siblings and caps.rerope
    assert not caps.node_kv and caps.reason("node_kv") and caps.reason("drafting")
    kid = loom.generate(node, 12, temperature=0)[0]
    assert len(kid.tokens) == 12 and kid.logprobs[0] < 0 and len(kid.top[0]) == 10
    exact(loom, kid, fresh)


def test_greedy_tokens_are_llama_cpps_own(loom, fresh):
    """Greedy decoding picks what a fresh evaluation's argmax picks at every step (a tie
    within rounding may go either way: then the two best must be that close)."""
    node = loom.append(loom.root, PROMPT)
    kid = loom.generate(node, 16, temperature=0)[0]
    path = node.path_tokens()
    for token in kid.tokens:
        logits = fresh.logits(path)
        best = int(logits.argmax())
        if token != best:
            assert float(logits[best] - logits[token]) < 0.05
            break
        path.append(token)


def test_truncate_costs_one_token_and_is_exact(loom, fresh):
    node = loom.append(loom.root, PROMPT)
    kid = loom.generate(node, 30, temperature=0)[0]
    loom.next_logits(kid)
    for length in (node.end + 17, node.end, 5):
        before = evaluated(loom)
        cut = loom.truncate(kid, length)
        exact(loom, cut, fresh)
        assert evaluated(loom) - before == 1  # the last token again, for its logits


def test_siblings_share_the_prefix_and_switching_costs_nothing(loom, fresh, default_gguf):
    node = loom.append(loom.root, PROMPT)
    kids = loom.generate(node, 8, n=4, seed=3, temperature=1.0)
    assert len(kids) == 4 and len({tuple(k.tokens) for k in kids}) > 1
    before = evaluated(loom)
    for kid in (kids[2], kids[0], kids[3], kids[1]):
        loom.next_logits(kid)
    assert evaluated(loom) == before  # each sibling kept its own sequence
    for kid in kids:
        exact(loom, kid, fresh)
    one = new_loom(default_gguf)
    try:
        settings = dict(max_new_tokens=8, n=4, seed=3, temperature=1.0)
        first, again = seeded_twice(one, default_gguf, **settings)
    finally:
        one.runner.close()
    assert first == again and len(set(map(tuple, first))) > 1  # seeded per row


def test_siblings_that_stop_early_leave_the_others_right(loom, fresh):
    """End-of-sequence tokens pushed up so that some siblings stop within a few tokens
    while others go on: every token's recorded log-probability, in every sibling, is a
    fresh evaluation's of its own path (a row fed another row's logits, or its own old
    ones, is off by far more than rounding)."""
    eos = sorted(loom.runner.eos_ids)
    node = loom.append(loom.root, PROMPT)
    kids = loom.generate(
        node, 12, n=8, seed=5, temperature=1.0, logit_bias={token: 14 for token in eos}
    )
    lengths = sorted(len(kid.tokens) for kid in kids)
    assert lengths[0] + 2 <= lengths[-1], f"no sibling stopped early: {lengths}"
    for kid in kids:
        path = node.path_tokens()
        for token, logprob in zip(kid.tokens, kid.logprobs):
            want = float(torch.log_softmax(fresh.logits(path).double(), -1)[token])
            assert abs(logprob - want) < 0.1, f"{logprob:.3f} against {want:.3f}"
            path.append(token)
        if kid.tokens[-1] not in eos:
            exact(loom, kid, fresh)


def test_branch_switch_evaluates_only_the_branch(loom, fresh):
    node = loom.append(loom.root, PROMPT + " in the fifteenth century, when")
    a = loom.generate(node, 20, temperature=0)[0]
    b = loom.append(node, " a goldsmith from Mainz")
    loom.next_logits(a)
    before = evaluated(loom)
    exact(loom, b, fresh)
    exact(loom, a, fresh)
    assert evaluated(loom) - before <= 2  # both stayed cached; at most their last tokens


def test_exact_splice_and_refresh_equal_a_fresh_evaluation(loom, fresh):
    node = loom.append(loom.root, PROMPT)
    kid = loom.generate(node, 30, temperature=0)[0]
    loom.next_logits(kid)
    spliced = loom.splice(kid, 2, 4, " story", exact=True)
    exact(loom, spliced, fresh)
    fast = loom.splice(kid, 3, 3, " long and winding")
    assert not loom.is_exact(fast)  # moved keys, flagged
    assert kl(fresh.logits(fast.path_tokens()), loom.next_logits(fast)) < 0.5
    loom.refresh(fast)
    exact(loom, fast, fresh)


def test_fast_splice_moves_the_suffix_instead_of_evaluating_it(loom, fresh):
    node = loom.append(loom.root, PROMPT)
    kid = loom.generate(node, 60, temperature=0)[0]
    loom.next_logits(kid)
    before = evaluated(loom)
    fast = loom.splice(kid, 3, 4, " long and winding")
    inserted = len(loom.encode(" long and winding"))
    # The inserted tokens (once by the Loom's own prepare) and the last token for logits.
    assert evaluated(loom) - before <= inserted + 2
    assert not loom.is_exact(fast)
    value = kl(fresh.logits(fast.path_tokens()), loom.next_logits(fast))
    assert value < 0.5
    # The old path was kept whole (a copy of its cells, llama_state_seq_*): going back to
    # it, and splicing it again, evaluates no more than before.
    assert loom.runner.kept_copies == 1
    before = evaluated(loom)
    exact(loom, kid, fresh)
    assert evaluated(loom) - before <= 1
    again = loom.splice(kid, 10, 11, " and")
    assert not loom.is_exact(again)
    # What is generated after approximate KV is approximate too, until refreshed.
    kid2 = loom.generate(fast, 4, temperature=0)[0]
    assert kid2.approx
    loom.refresh(kid2)
    exact(loom, kid2, fresh)


@pytest.mark.parametrize(
    "sampling",
    [
        dict(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05),
        dict(temperature=1.0, typical_p=0.9, repetition_penalty=1.3, presence_penalty=0.5),
        dict(temperature=1.0, mirostat=2),
        dict(temperature=1.0, dry_multiplier=0.8, xtc_probability=0.5, xtc_threshold=0.1),
    ],
)
def test_every_sampler_runs_on_llama_cpp_logits(loom, sampling, default_gguf):
    # ``loom`` is fresh: its first generation starts from the same state as the twin's.
    first, again = seeded_twice(loom, default_gguf, max_new_tokens=6, n=2, seed=7, **sampling)
    assert all(len(tokens) == 6 for tokens in first) and first == again


def test_a_full_cache_drops_the_oldest_branch(binding, default_gguf, fresh):
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    runner = LlamaCppRunner(default_gguf, n_ctx=256, threads=THREADS, cells=256, sequences=4)
    loom = Loom(runner)
    try:
        node = loom.append(loom.root, PROMPT)
        branches = [loom.generate(node, 60, temperature=0, top_k=1 + i)[0] for i in range(4)]
        branches += loom.generate(node, 60, n=2, seed=1, temperature=1.0)
        assert runner.evictions > 0
        for branch in branches:
            exact(loom, branch, fresh)
    finally:
        runner.close()


def test_bad_input_is_one_line(binding, default_gguf, tmp_path):
    with pytest.raises(InputError, match=r"runs a \.gguf file"):
        Loom.load(model=str(tmp_path), backend="llama.cpp")
    with pytest.raises(InputError, match="backend 'vulkan'"):
        Loom.load(model=str(default_gguf), backend="vulkan")
    loom = Loom.load(model=str(default_gguf), backend="llama.cpp", n_ctx=512, threads=THREADS)
    try:
        node = loom.append(loom.root, PROMPT)
        with pytest.raises(InputError, match="banned strings need the torch runner"):
            loom.generate(node, 4, banned_strings=["the"])
    finally:
        loom.runner.close()


def test_a_session_on_llama_cpp_is_told_by_its_gguf_file_without_the_model(
    loom, default_gguf, tmp_path, isolated_dirs
):
    """``loomterm --backend llama.cpp --model FILE.gguf`` with no -s paints the most recent
    session at once when it was written on that file: its recorded weights are the
    file's digest (``sessions.identity.same_as_recorded``); on the torch runner the same
    file is another fingerprint (its conversion's), so a new session, as loading says."""
    from loomterm.config.settings import EngineOptions
    from loomterm.sessions.identity import same_as_recorded
    from loomterm.sessions.session import close_session, read_file, save_loom

    loom.cursor = loom.append(loom.root, PROMPT)
    path = tmp_path / "llama.loom"
    save_loom(loom, path)
    close_session(loom)
    opened = read_file(path, True)
    try:
        record = opened.data.model
        on = {
            backend: same_as_recorded(
                record, EngineOptions(model=str(default_gguf), backend=backend)
            )
            for backend in ("llama.cpp", "torch")
        }
    finally:
        opened.close()
    assert on == {"llama.cpp": True, "torch": False}
