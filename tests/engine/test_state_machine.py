"""Random sequences of operations on a loom, each result checked against a recompute."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from loomterm.sessions.session import close_session, open_loom, save_loom, session_of
from tests.helpers import REL_TOL, WORST, make_loom, reference_logits, relative_error

# Sequences and steps run, for the record (printed with -s).
STATS = {"sequences": 0, "steps": 0}

WORDS = st.sampled_from(
    [" the", " fox", " caf\u00e9", " \u65e5\u672c", ".", " once upon", "\n", " weaver"]
)


def assert_matches_context(loom, node, tol: float = REL_TOL) -> None:
    """next_logits(node) equals a plain forward over exactly what the model sees for it:
    ``loom.context_tokens`` (memory, world info, the author's note inside the path; the
    path's window when nothing is injected)."""
    seen = loom.context_tokens(node)
    err = relative_error(loom.next_logits(node), reference_logits(loom, seen))
    WORST["relative"] = max(WORST["relative"], err)
    WORST["checks"] += 1
    assert err < tol, f"next_logits differs from a recompute of the context by {err:.2e}"


class LoomMachine(RuleBasedStateMachine):
    folder = None
    n_ctx = None

    @initialize(text=st.lists(WORDS, min_size=1, max_size=6))
    def start(self, text):
        import tempfile
        from pathlib import Path

        self.session_path = Path(tempfile.mkdtemp()) / "fuzz.loom"
        STATS["sequences"] += 1
        self.loom = make_loom(self.folder, n_ctx=self.n_ctx)
        node = self.loom.append(self.loom.root, "".join(text))
        self.nodes = [node]
        self.expected = {node.id: self.loom.tokens(node)}

    def _track(self, node):
        if node.end == 0:  # everything was deleted: the root, nothing to predict from
            assert node is self.loom.root
            return node
        self.nodes.append(node)
        self.expected.setdefault(node.id, self.loom.tokens(node))
        return node

    def _check(self, node):
        if node.end and self.loom.is_exact(node):
            assert_matches_context(self.loom, node)

    @rule(
        memory=st.sampled_from(["", "The weaver.", " fox\n"]),
        note=st.sampled_from(["", "[terse]", " once upon"]),
        depth=st.integers(0, 3),
        world=st.booleans(),
        scan=st.integers(1, 8),
    )
    def change_context(self, memory, note, depth, world, scan):
        entries = [{"keys": ["fox", "the"], "text": "A fox."}] if world else []
        self.loom.update_settings(
            memory=memory,
            authors_note=note,
            authors_note_depth=depth,
            world_info={"scan_depth": scan, "entries": entries},
        )
        self._check(self.nodes[-1])

    @rule(data=st.data(), text=st.lists(WORDS, min_size=1, max_size=3))
    def append(self, data, text):
        node = data.draw(st.sampled_from(self.nodes))
        self._check(self._track(self.loom.append(node, "".join(text))))

    @rule(data=st.data(), n=st.integers(1, 3), steps=st.integers(1, 6), seed=st.integers(0, 99))
    def generate(self, data, n, steps, seed):
        node = data.draw(st.sampled_from(self.nodes))
        for kid in self.loom.generate(node, steps, n=n, temperature=1.0, seed=seed):
            self._check(self._track(kid))

    @rule(data=st.data())
    def truncate(self, data):
        node = data.draw(st.sampled_from(self.nodes))
        length = data.draw(st.integers(1, node.end))
        self._check(self._track(self.loom.truncate(node, length)))

    @rule(data=st.data(), text=st.lists(WORDS, max_size=2), exact=st.booleans())
    def splice(self, data, text, exact):
        node = data.draw(st.sampled_from(self.nodes))
        start = data.draw(st.integers(0, node.end))
        end = data.draw(st.integers(start, min(node.end, start + 4)))
        if start == end and not text:
            return
        new = self.loom.splice(node, start, end, "".join(text), exact=exact)
        if exact and self.loom.is_exact(node):
            assert self.loom.is_exact(new)
        self._check(self._track(new))

    @rule(data=st.data(), word=WORDS, exact=st.booleans())
    def edit(self, data, word, exact):
        node = data.draw(st.sampled_from(self.nodes))
        text = self.loom.text(node)
        at = data.draw(st.integers(0, len(text)))
        new_text = text[:at] + word + text[at:]
        edited = self.loom.edit(node, new_text, exact=exact)
        assert self.loom.text(edited) == new_text
        self._check(self._track(edited))

    @precondition(lambda self: any(n.approx for n in self.loom.tree.nodes.values()))
    @rule(data=st.data())
    def refresh(self, data):
        approx = [n for n in self.nodes if not self.loom.is_exact(n)]
        if not approx:
            return
        node = data.draw(st.sampled_from(approx))
        self.loom.refresh(node)
        assert self.loom.is_exact(node)
        assert_matches_context(self.loom, node)

    @rule(data=st.data())
    def pick(self, data):
        node = data.draw(st.sampled_from(self.nodes))
        spots = [(n.start + i, alts) for n in node.path() for i, alts in enumerate(n.top) if alts]
        if not spots:
            return
        position, alts = data.draw(st.sampled_from(spots))
        token = data.draw(st.sampled_from([t for t, _ in alts]))
        self._check(self._track(self.loom.pick(node, position, token)))

    @rule(data=st.data())
    def evict(self, data):
        resident = [n for n in self.loom.tree.nodes.values() if n.kv is not None]
        if not resident:
            return
        node = data.draw(st.sampled_from(resident))
        self.loom.evict(node)
        assert node.kv is None and node.tokens == self.loom.tree.nodes[node.id].tokens

    @rule(data=st.data())
    def save_and_reopen(self, data):
        cursor = data.draw(st.sampled_from(self.nodes))
        self.loom.cursor = cursor
        if session_of(self.loom) is None:
            save_loom(self.loom, self.session_path)
        before = {n.id: self.loom.tokens(n) for n in self.loom.tree.nodes.values()}
        close_session(self.loom)
        self.loom = open_loom(self.session_path, n_ctx=self.n_ctx)
        after = {n.id: self.loom.tokens(n) for n in self.loom.tree.nodes.values()}
        assert after == before  # nothing lost, nothing changed
        assert self.loom.cursor.id == cursor.id
        self.nodes = [self.loom.tree.nodes[n.id] for n in self.nodes]
        self._check(self.loom.cursor)

    def teardown(self):
        if hasattr(self, "loom"):
            close_session(self.loom)

    @invariant()
    def every_path_is_stable(self):
        if not hasattr(self, "loom"):
            return
        STATS["steps"] += 1
        for node in self.nodes:
            assert self.loom.tokens(node) == self.expected[node.id]


SETTINGS = settings(
    max_examples=20,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize("n_ctx", [None, 40])
def test_random_operation_sequences(family, tiny_llama_dir, tiny_gpt2_dir, n_ctx):
    folder = tiny_llama_dir if family == "llama" else tiny_gpt2_dir
    machine = type(f"{family.title()}Machine", (LoomMachine,), {"folder": folder, "n_ctx": n_ctx})
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(machine, settings=SETTINGS)
    print(f"fuzzed {STATS['sequences']} op sequences, {STATS['steps']} steps so far")
