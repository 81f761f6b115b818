"""The journal as a reader (``loomterm.store.journal``): lines in order across folders,
torn lines skipped, and any file at all (fuzzed) read into a sound tree or refused in
one line, never a traceback, a cycle or a file that cannot be written."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomterm import store
from loomterm.errors import SessionError
from loomterm.store import SessionData, SessionStore, journal
from loomterm.store.journal import Journal, node_state, token_state
from loomterm.tree import Origin, Tree


def small_session(path) -> SessionData:
    tree = Tree()
    first = tree.add(tree.root, [1, 2, 3], Origin.USER)
    tree.add(first, [4, 5], Origin.MODEL, logprobs=[-0.5, -1.0], top=[[(4, -0.5)], None])
    data = SessionData(
        tree=tree,
        pieces={n.id: [f"t{t}" for t in n.tokens] for n in tree.nodes.values()},
        cursor=first.id,
        model={"name": "m", "source": "m"},
    )
    store.write_session(path, data).close()
    return data


def test_lines_are_replayed_in_order_and_a_torn_last_line_is_skipped(tmp_path, monkeypatch):
    path = tmp_path / "s.loom"
    data = small_session(path)
    tree = data.tree
    first = tree.nodes[data.cursor]
    kept = Journal(path)
    new = tree.add(first, [7, 8], Origin.USER)
    kept.write("node", node_state(new, ["a", "b"]))
    new.tokens += [9]
    new.logprobs += [None]
    new.top += [None]
    kept.write("tokens", token_state(new, 2, 3, ["c"]))
    kept.write("set", {"cursor": new.id})
    with open(kept.where, "a") as handle:
        handle.write('{"kind": "set", "n": 99, "t": 1e12, "value": {"cur')  # torn
    read = store.load(path)  # a reader sees the journal's changes
    assert read.path_text(read.cursor_node) == "t1t2t3abc"
    SessionStore.open(path).close()  # the writer puts them in the file
    assert journal.journal_files(path) == []
    assert store.load(path).path_text() == "t1t2t3abc"


line = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["node", "tokens", "removed", "set", "vocab", "other"]),
        "n": st.integers(0, 50),
        "t": st.floats(0, 10),
        "value": st.recursive(
            st.none()
            | st.booleans()
            | st.integers(-(2**70), 2**70)
            | st.floats(allow_nan=True)
            | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(
                    st.sampled_from(
                        [
                            "id",
                            "parent",
                            "position",
                            "origin",
                            "tokens",
                            "logprobs",
                            "top",
                            "pieces",
                            "start",
                            "cursor",
                            "caret",
                            "typed",
                            "meta",
                            "sampling",
                            "seed",
                            "created",
                            "settings",
                            "1",
                            "2",
                        ]  # fmt: skip
                    ),
                    inner,
                    max_size=8,
                )
            ),
            max_leaves=20,
        ),
    }
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(line, max_size=8), tail=st.binary(max_size=40))
def test_any_journal_reads_into_a_sound_tree_or_one_line(tmp_path_factory, lines, tail):
    folder = tmp_path_factory.mktemp("fuzz")
    import os

    os.environ["LOOMTERM_DATA_DIR"] = str(folder / "data")
    path = folder / "s.loom"
    small_session(path)
    target = journal.journal_dirs()[0] / journal.journal_name(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    header = json.dumps({"format": journal.FORMAT, "session": str(path.absolute())})
    body = "\n".join(json.dumps(item) for item in lines)
    target.write_bytes(header.encode() + b"\n" + body.encode() + b"\n" + tail)
    try:
        data = store.load(path)
    except SessionError as exc:
        assert "\n" not in str(exc)
        return
    seen = list(data.tree.root.walk())  # no cycle: the walk ends
    assert len(seen) == len(data.tree.nodes)
    try:
        SessionStore.open(path).close()  # the writer writes it whole
    except SessionError as exc:
        assert "\n" not in str(exc)
        return
    assert journal.journal_files(path) == []
    store.load(path)


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(tmp_path / "data"))
