"""Foresight on the llama.cpp runner: nodes written ahead keep their sequences, so
taking them and reading on from each evaluates nothing, and each is exact."""

from __future__ import annotations

from tests.helpers import tree_record
from tests.llamacpp.test_runner import PROMPT, evaluated, exact, loom  # noqa: F401 - fixture


def test_taken_foreseen_nodes_keep_their_sequences(loom, fresh):  # noqa: F811 - the fixture
    node = loom.append(loom.root, PROMPT)
    settings = loom.settings.replace(max_new_tokens=8, temperature=1.0)
    before = tree_record(loom.tree)
    foresight = loom.foresee(loom.ask(node, 3, settings))
    assert foresight is not None and all(len(d.tokens) == 8 for d in foresight.nodes)
    assert tree_record(loom.tree) == before and node.children == []
    written = [(list(d.tokens), list(d.logprobs)) for d in foresight.nodes]
    count = evaluated(loom)
    kids = loom.take_foresight(loom.ask(node, 3, settings))
    assert kids == foresight.nodes and node.children == kids
    assert [(list(k.tokens), list(k.logprobs)) for k in kids] == written
    for kid in (kids[2], kids[0], kids[1]):
        loom.next_logits(kid)
    assert evaluated(loom) == count  # each node kept its own sequence: nothing again
    for kid in kids:
        exact(loom, kid, fresh)


def test_a_mismatched_request_generates_as_usual(loom, fresh):  # noqa: F811 - the fixture
    node = loom.append(loom.root, PROMPT)
    settings = loom.settings.replace(max_new_tokens=6)
    assert loom.foresee(loom.ask(node, 2, settings)) is not None
    assert loom.take_foresight(loom.ask(node, 1, settings)) is None
    assert loom.tree.foreseen == {} and node.children == []
    (kid,) = loom.generate(node, 6)
    exact(loom, kid, fresh)
