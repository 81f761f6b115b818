"""A change that fails half way leaves the session file as it was: each store method is
one transaction, rolled back on any error, and the store (and its lock) stays usable.
The damaged-file checks of the reader refuse each inconsistency by name.

No model: trees are built by hand, the pieces are the token ids as text."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from loomterm.errors import SessionError
from loomterm.store import SessionLock, SessionStore, load, write_session
from loomterm.store.data import SessionData
from loomterm.tree import Node, Origin, Tree

MODEL = {"name": "hand-made", "fingerprint": {"weights": "none"}}


def assert_unlocked(path: Path) -> None:
    """No writer holds ``path`` (taking its lock succeeds)."""
    lock = SessionLock(path)
    lock.acquire()
    lock.release()


def pieces(node: Node) -> list[str]:
    return [f"<{t}>" for t in node.tokens]


def small_tree() -> tuple[Tree, Node, Node]:
    tree = Tree()
    a = tree.add(tree.root, [1, 2, 3], Origin.USER)
    b = tree.add(a, [4, 5], Origin.MODEL, logprobs=[-0.5, -1.25], seed=7)
    return tree, a, b


def record(path: Path) -> tuple:
    """Everything a reader sees, comparable (the modified time left out)."""
    data = load(path)
    nodes = [
        (n.id, n.parent.id if n.parent else None, n.tokens, n.logprobs, n.origin.value, n.seed)
        for n in data.tree.root.walk()
    ]
    pieces = sorted((k, tuple(v)) for k, v in data.pieces.items())
    return nodes, pieces, data.cursor, data.settings, data.model, data.vocab


@pytest.fixture
def stored(tmp_path):
    """A session file with a small tree, open for writing."""
    tree, a, b = small_tree()
    path = tmp_path / "s.loom"
    store = SessionStore.create(path, model=MODEL, settings={"n": 2})
    store.write_tree(tree, pieces, b)
    yield store, tree, a, b
    store.close()


def test_a_failing_statement_rolls_the_whole_change_back(stored):
    store, tree, a, b = stored
    before = record(store.path)
    clash = Node(id=b.id, parent=a, tokens=[9], logprobs=[None], top=[None])  # id taken
    a.children.append(clash)
    with pytest.raises(SessionError, match=r"^cannot write session s\.loom: .*UNIQUE"):
        store.add_node(clash, ["<9>"])
    a.children.remove(clash)
    assert record(store.path) == before
    # The store is still usable: the next change goes through.
    c = tree.add(a, [6], Origin.USER)
    store.add_node(c, ["<6>"])
    after = load(store.path)
    assert [n.tokens for n in after.tree.nodes[a.id].children] == [[4, 5], [6]]


def test_an_error_after_some_rows_were_written_rolls_them_back(stored):
    """The node row goes in before its tokens are checked: the bad pieces count must
    take the node row back out with it."""
    store, tree, a, b = stored
    before = record(store.path)
    c = tree.add(a, [6, 7], Origin.USER)
    with pytest.raises(ValueError, match="1 pieces for 2 tokens"):
        store.add_node(c, ["<6>"])
    assert record(store.path) == before
    assert c.id not in load(store.path).tree.nodes


def test_rewriting_the_whole_tree_fails_whole(stored):
    store, tree, a, b = stored
    before = record(store.path)
    other = Tree()
    x = other.add(other.root, [8, 8, 8], Origin.USER)
    other.add(x, [9], Origin.USER)

    def bad_pieces(node: Node) -> list[str]:  # wrong for the last node only
        return pieces(node) if node.tokens != [9] else []

    with pytest.raises(ValueError):
        store.write_tree(other, bad_pieces, x, model={"name": "other"})
    assert record(store.path) == before  # neither the nodes nor the model changed


def test_rewrite_node_replaces_its_row_and_every_token(stored):
    store, tree, a, b = stored
    b.tokens[:] = [40]  # an edit that was not an append: the node shrank
    b.logprobs[:] = [None]
    b.top[:] = [None]
    b.approx = True
    store.rewrite_node(b, ["<40>"])
    data = load(store.path)
    again = data.tree.nodes[b.id]
    assert again.tokens == [40] and again.logprobs == [None] and again.approx
    assert data.pieces[b.id] == ["<40>"]
    assert data.tree.nodes[a.id].tokens == [1, 2, 3]


def test_a_closed_store_refuses_changes_in_one_line(stored):
    store, tree, a, b = stored
    store.close()
    store.close()  # twice is harmless
    assert store.closed
    with pytest.raises(SessionError, match=r"^session s\.loom is closed$"):
        store.set_cursor(a)
    # The lock went with it: another writer may open the file now.
    SessionStore.open(store.path).close()


def _short_of_a_piece(tmp_path: Path) -> tuple[Path, SessionData]:
    tree, a, b = small_tree()
    data = SessionData(
        tree=tree,
        pieces={tree.root.id: [], a.id: pieces(a), b.id: ["<4>"]},  # b is short a piece
        cursor=b.id,
        settings={},
        model=MODEL,
    )
    return tmp_path / "w.loom", data


def test_write_session_releases_the_lock_when_writing_fails(tmp_path):
    path, data = _short_of_a_piece(tmp_path)
    with pytest.raises(ValueError):
        write_session(path, data)
    assert_unlocked(path)


def test_a_failed_write_session_leaves_no_file_behind(tmp_path):
    path, data = _short_of_a_piece(tmp_path)
    with pytest.raises(ValueError):
        write_session(path, data)
    assert not path.exists()


def test_write_session_keeps_every_field_and_the_vocab(tmp_path):
    tree, a, b = small_tree()
    data = SessionData(
        tree=tree,
        pieces={node.id: pieces(node) for node in tree.root.walk()},
        cursor=a.id,
        settings={"top_k": 3},
        model=MODEL,
        vocab={4: "four", 5: "five"},
    )
    path = tmp_path / "v.loom"
    write_session(path, data).close()
    nodes, stored_pieces, cursor, settings, model, vocab = record(path)
    assert nodes == [
        (0, None, [], [], "root", None),
        (a.id, 0, [1, 2, 3], [None] * 3, "user", None),
        (b.id, a.id, [4, 5], [-0.5, -1.25], "model", 7),
    ]
    assert dict(stored_pieces)[b.id] == ("<4>", "<5>")
    assert (cursor, settings, model, vocab) == (a.id, {"top_k": 3}, MODEL, {4: "four", 5: "five"})
    with pytest.raises(SessionError, match="already exists"):
        write_session(path, data)


def test_set_model_is_recorded_with_the_tree_and_drops_the_old_vocab(stored):
    store, tree, a, b = stored
    store.add_vocab({4: "four"})
    store.add_vocab({})  # nothing to add: no transaction
    assert store.known_vocab() == {4}
    store.write_tree(tree, pieces, a, model={"name": "next"})
    data = load(store.path)
    assert data.model == {"name": "next"} and data.vocab == {} and data.cursor == a.id
    assert store.known_vocab() == set()


# -- the reader's consistency checks --------------------------------------------------------


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tampered(path: Path, tmp_path: Path, *statements: str) -> Path:
    """A copy of the session with ``statements`` applied behind the store's back."""
    copy = tmp_path / f"t{len(list(tmp_path.glob('t*.loom')))}.loom"
    shutil.copy(path, copy)
    conn = sqlite3.connect(copy)
    conn.execute("PRAGMA foreign_keys = OFF")
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return copy


@pytest.mark.parametrize(
    "statements, problem",
    [
        (["DELETE FROM session WHERE key = 'format'"], "its session record is missing"),
        (["UPDATE nodes SET parent = 1 WHERE parent IS NULL"], "expected one root node, found 0"),
        (["UPDATE nodes SET parent = NULL WHERE id = 2"], "expected one root node, found 2"),
        (["UPDATE nodes SET parent = 99 WHERE id = 2"], "node 2 hangs from missing node 99"),
        (
            ["UPDATE nodes SET parent = 2 WHERE id = 1"],  # 1 and 2 hang from each other
            "some nodes are not reachable from the root",
        ),
        (
            ["DELETE FROM tokens WHERE node = 1 AND idx = 1"],
            "token rows of node 1 are out of order",
        ),
        (
            ["INSERT INTO tokens(node, idx, token, piece) VALUES (99, 0, 1, 'x')"],
            "token rows of node 99 are out of order",
        ),
    ],
)
def test_an_inconsistent_file_is_refused_by_name_and_untouched(
    stored, tmp_path, statements, problem
):
    store, tree, a, b = stored
    assert (a.id, b.id) == (1, 2)
    store.close()
    bad = tampered(store.path, tmp_path, *statements)
    digest = sha(bad)
    with pytest.raises(SessionError) as info:
        load(bad)
    assert problem in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(SessionError):
        SessionStore.open(bad)  # nor opened for writing ...
    assert sha(bad) == digest  # ... and never touched
    assert_unlocked(bad)  # the refused open released its lock
