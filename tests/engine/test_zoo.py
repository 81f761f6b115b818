"""The zoo: every decoder-only family transformers ships that a writer might load, as a
tiny seeded model (``tests.tiny_models.ZOO``), put through random edits -- append,
generate (drafted and plain), truncate, splice exact and fast, regenerate siblings,
switch branches -- with every exact node's next logits checked against a plain
transformers forward of the same token path, with the model's own attention.

Per family it also states what loomterm does with it: whether it runs loomterm's
attention or falls back to the model's own (``FALLBACK``), and whether a fast splice
re-ropes (``REROPE``: only where shifting cached keys is proven equal to recomputing
them, here and at load by ``kv.rope.probe_rope``; elsewhere a fast splice is exact).

``python -m tests.engine.test_zoo`` prints the table the run saw.
"""

from __future__ import annotations

import random

import pytest

from loomterm.engine.kv.rope import rerotate
from tests.helpers import (
    WORST,
    ForwardCounter,
    assert_same_greedy,
    make_loom,
    reference_logits,
    relative_error,
)
from tests.tiny_models import ZOO, build_tiny_arch

# float32 noise: the engine's tolerance (tests.helpers.REL_TOL).
TOL = 1e-4
# Families that keep their own attention, and what the note names.
FALLBACK = {
    "gemma2": "soft-capping",
    "gemma3_text-softcap": "soft-capping",
    "bloom": "no SDPA path",
    "mpt": "no SDPA path",
    "gpt_neo": "no SDPA path",
    "xglm": "no SDPA path",
    "vaultgemma": "soft-capping",
    "gpt_oss": "attention sinks",
}
# Families whose fast splice re-ropes (shift proven equal to recompute); the rest are
# recomputed: learned absolute positions (GPT-2, OPT), ALiBi (Bloom, MPT, Falcon's
# ALiBi variant), per-layer RoPE (Gemma 3's local/global bases, rope-free global or
# interleaved layers: Cohere 2, OLMo 3, EXAONE 4, SmolLM3, Llama 4) and length-dependent
# scaling (LongRoPE).
NO_REROPE = {
    "gemma3",
    "gemma3_text-softcap",
    "gemma3_text",
    "phi3-longrope",
    "gpt2",
    "opt",
    "bloom",
    "mpt",
    "falcon-alibi",
    "cohere2",
    "smollm3",
    "gpt_neo",
    "gpt_bigcode",
    "biogpt",
    "xglm",
    "olmo3",
    "exaone4",
    "llama4_text",
    "cohere2_moe",
}
REROPE = sorted(set(ZOO) - NO_REROPE)
WORDS = [" the", " fox", " caf\u00e9", " \u65e5\u672c", ".", " once upon", "\n", " weaver"]
# What each family's run saw: {arch: {"worst", "checks", "attention", "rerope"}}.
TABLE: dict[str, dict] = {}


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


def check(loom, node, seen: dict) -> None:
    """``node``'s next logits equal a plain forward of its path (exact nodes only)."""
    if not node.end or not loom.is_exact(node):
        return
    err = relative_error(loom.next_logits(node), reference_logits(loom, loom.tokens(node)))
    seen["worst"] = max(seen["worst"], err)
    seen["checks"] += 1
    WORST["relative"] = max(WORST["relative"], err)
    WORST["checks"] += 1
    assert err < TOL, f"node {node.id} differs from a recompute by {err:.2e} (relative)"


def random_edits(loom, rng: random.Random, seen: dict, steps: int = 10) -> None:
    """``steps`` random operations, each result checked, then every node of the tree
    (each check switches the working cache to that node's branch)."""
    first = loom.append(loom.root, "Once upon a time, in a land far away, there lived")
    nodes = [first]
    check(loom, first, seen)
    for _ in range(steps):
        node = rng.choice(nodes)
        op = rng.choice(["append", "generate", "siblings", "truncate", "splice", "fast"])
        length = node.end
        if op == "append":
            made = [loom.append(node, "".join(rng.choices(WORDS, k=rng.randint(1, 3))))]
        elif op == "generate":
            drafting = rng.choice(["off", "lookahead", "auto"])
            made = loom.generate(node, rng.randint(3, 8), temperature=0.0, drafting=drafting)
        elif op == "siblings":
            made = loom.generate(node, 4, n=3, temperature=0.9, seed=rng.randint(0, 999))
        elif op == "truncate" and length > 2:
            made = [loom.truncate(node, rng.randint(1, length - 1))]
        elif op in ("splice", "fast") and length > 3:
            start = rng.randint(1, length - 2)
            end = min(length - 1, start + rng.randint(0, 2))
            made = [loom.splice(node, start, end, rng.choice(WORDS), exact=op == "splice")]
        else:
            made = [loom.append(node, rng.choice(WORDS))]
        for child in made:
            if child.end:
                nodes.append(child)
                check(loom, child, seen)
    for node in list(loom.tree.nodes.values()):
        if node.parent is not None and node.end:
            if not loom.is_exact(node):
                loom.refresh(node)  # fast splices come back exact
            check(loom, node, seen)


@pytest.mark.parametrize("arch", sorted(ZOO))
def test_family_holds_exactly_under_random_edits(arch, zoo_dir):
    loom = make_loom(build_tiny_arch(zoo_dir / arch, arch))
    runner = loom.runner
    seen = {"worst": 0.0, "checks": 0, "attention": "loomterm", "rerope": runner.rope is not None}
    TABLE[arch] = seen
    note = runner.attention_note
    if arch in FALLBACK:
        assert note is not None and FALLBACK[arch] in note, note
        assert runner.model.config._attn_implementation != "loom"
        seen["attention"] = runner.model.config._attn_implementation
        if FALLBACK[arch] == "soft-capping":
            assert seen["attention"] == "eager"  # SDPA raises on a cap
        assert not loom.capabilities.drafting  # its tree masks need loomterm's attention
    else:
        assert note is None, note
        assert runner.model.config._attn_implementation == "loom"
    random_edits(loom, random.Random(sum(map(ord, arch))), seen)
    assert seen["checks"] >= 8


@pytest.mark.parametrize("arch", sorted(ZOO))
def test_fast_splice_only_where_shift_equals_recompute(arch, zoo_dir):
    folder = zoo_dir / arch
    if not (folder / "config.json").exists():
        build_tiny_arch(folder, arch)
    loom = make_loom(folder)
    spec = loom.runner.rope
    assert (spec is not None) == (arch in REROPE), f"{arch}: re-rope {spec}"
    node = loom.append(loom.root, "Once upon a time, in a land far away, there lived a weaver")
    fast = loom.splice(node, 2, 3, " long", exact=False)
    if spec is None:
        assert loom.is_exact(fast)  # asked for fast, got exact
    else:
        # The proof: keys computed at position 0 and moved by 53 equal keys computed
        # at 53, in every layer; values do not move.
        tokens = loom.encode("Once upon a time, in a land far away")
        at_zero = loom.runner.fresh_kv(tokens, 0)
        at_delta = loom.runner.fresh_kv(tokens, 53)
        scale = at_delta.abs().max()
        moved = rerotate(at_zero[:, 0], 53, spec)
        assert (moved - at_delta[:, 0]).abs().max() / scale < TOL
        assert (at_zero[:, 1] - at_delta[:, 1]).abs().max() / scale < TOL
        assert not loom.is_exact(fast)
        loom.refresh(fast)
    err = relative_error(loom.next_logits(fast), reference_logits(loom, loom.tokens(fast)))
    assert err < TOL


@pytest.mark.parametrize("arch", sorted(ZOO))
def test_drafted_greedy_equals_plain_greedy(arch, zoo_dir):
    """Drafted decoding (where the family allows it) writes the tokens plain greedy
    decoding writes (up to a tie in float32 noise: ``assert_same_greedy``), and its
    child is exact. Its tree masks replace the masks
    transformers builds, so it is off where they would drop something: a generation
    reaching past a sliding window or chunk (Mistral's drafts once wrote other tokens
    there), ALiBi, the model's own attention."""
    folder = zoo_dir / arch
    if not (folder / "config.json").exists():
        build_tiny_arch(folder, arch)
    loom = make_loom(folder)
    node = loom.append(loom.root, "Once upon a time, in a land far away, there lived a weaver who")
    plain = loom.generate(node, 24, temperature=0.0, drafting="off")[0]
    seen = {"worst": 0.0, "checks": 0}
    for mode in ("lookahead", "tree"):
        drafted = loom.generate(node, 24, temperature=0.0, drafting=mode)[0]
        assert_same_greedy(loom, drafted, plain, mode)
        check(loom, drafted, seen)
    assert seen["checks"] == 2


def test_drafting_runs_inside_a_sliding_window_and_stops_past_it(tmp_path):
    """A Mistral with a 96-token window drafts a short generation (every column inside
    the window: the tree mask drops nothing) and decodes a long one plainly."""
    from loomterm.engine.generation import GenerateRequest
    from loomterm.engine.sample.chain import SamplingParams

    loom = make_loom(build_tiny_arch(tmp_path / "mistral", "mistral", sliding_window=96))
    runner = loom.runner
    assert loom.capabilities.drafting and runner.draft_limit == 96
    node = loom.append(loom.root, "Once upon a time")
    loom.next_logits(node)  # the working cache holds the node, as decode reads it

    def request(tokens: int) -> GenerateRequest:
        return GenerateRequest(
            node, tokens, 1, SamplingParams(temperature=0.0), drafting="lookahead"
        )

    assert runner.drafting_for(request(16)) is not None
    assert runner.drafting_for(request(90)) is None
    plain = loom.generate(node, 16, temperature=0.0, drafting="off")[0]
    with ForwardCounter(loom) as counter:
        drafted = loom.generate(node, 16, temperature=0.0, drafting="lookahead")[0]
    assert counter.tokens > counter.calls  # blocks of drafted tokens were verified
    assert_same_greedy(loom, drafted, plain)
    check(loom, drafted, {"worst": 0.0, "checks": 0})


# One family per mechanism that meets the context window differently: the model's own
# attention (eager), per-layer RoPE, ALiBi, partial and interleaved rotary, sliding
# windows, learned absolute positions.
PAST_N_CTX = [
    "bloom",
    "cohere2",
    "falcon-alibi",
    "gemma2",
    "gemma3_text",
    "gpt_oss",
    "gptj",
    "mistral",
    "mpt",
    "opt",
    "phi",
    "smollm3",
]


@pytest.mark.parametrize("arch", PAST_N_CTX)
def test_family_holds_past_the_context_window(arch, zoo_dir):
    """Generation runs past ``n_ctx`` (the window slides: re-rotated where the family
    re-ropes, recomputed where not); refreshed, every node equals a plain forward of
    its window, and going back below ``n_ctx`` uses the exact prefix again."""
    folder = zoo_dir / arch
    if not (folder / "config.json").exists():
        build_tiny_arch(folder, arch)
    loom = make_loom(folder, n_ctx=32)
    node = loom.append(loom.root, "Once upon a time, in a land far away,")
    seen = {"worst": 0.0, "checks": 0}
    for kid in loom.generate(node, 50, n=2, temperature=1.0, seed=4):
        assert kid.end > loom.n_ctx
        if loom.runner.rope is None:
            assert loom.is_exact(kid)  # nothing to re-rotate: the window was recomputed
        loom.refresh(kid)
        check(loom, kid, seen)
        check(loom, loom.truncate(kid, 20), seen)
    assert seen["checks"] == 4


def table() -> str:
    """The zoo's table as the tests saw it (markdown)."""
    lines = [
        "| architecture | model type | exact worst rel. error | checks | attention | fast splice |",
        "|---|---|---|---|---|---|",
    ]
    for arch in sorted(TABLE):
        row = TABLE[arch]
        attention = (
            "loomterm" if row["attention"] == "loomterm" else f"fallback: {row['attention']}"
        )
        rerope = "re-rope (proven)" if row["rerope"] else "exact recompute"
        lines.append(
            f"| {arch} | {ZOO[arch][0]} | {row['worst']:.1e} | {row['checks']} | "
            f"{attention} | {rerope} |"
        )
    return "\n".join(lines)


def test_zoo_table_prints(capsys):
    """Runs last in this module: print the table (shown with ``-s``)."""
    if TABLE:
        with capsys.disabled():
            print("\n" + table())


if __name__ == "__main__":
    import sys

    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:randomly"]))
