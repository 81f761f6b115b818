"""A session with several models comes back as it was: reopened for editing
(``Session.open(reattach=True)``, what the editor does), it attaches again every model it
had attached, under the same keys, in their recorded precision, and makes the active
one active again; one that cannot come back is a one-line note, and its branches stay."""

from __future__ import annotations

import json
import shutil
import sqlite3
import warnings

import pytest

from loomterm.sessions.session import Session, load_session
from tests.helpers import make_loom
from tests.tiny_models import build_tiny_llama

PROMPT = "Once upon a time"


@pytest.fixture
def folders(tiny_llama_dir, tiny_gpt2_dir, tmp_path):
    """Copies of the tiny models (a test may delete or replace one)."""
    llama = shutil.copytree(tiny_llama_dir, tmp_path / "models" / "llama")
    gpt2 = shutil.copytree(tiny_gpt2_dir, tmp_path / "models" / "gpt2")
    return llama, gpt2


def two_models(folders, path, **attach):
    """A session on the tiny Llama with the tiny GPT-2 attached as "g"; each wrote a
    greedy branch from the prompt; "g" is active when it is closed."""
    llama, gpt2 = folders
    loom = make_loom(llama)
    loom.update_settings(temperature=0.0)
    session = Session.create(loom, path)
    assert loom.open_model(str(gpt2), "g", **attach) == "g"
    prompt = loom.append(loom.root, PROMPT)
    [mine] = loom.generate(prompt, 6)
    [theirs] = loom.generate(prompt, 6, model="g")
    loom.use("g")
    loom.cursor = theirs
    main = loom.active_model if loom.active_model != "g" else next(iter(loom.models))
    session.close()
    return main, prompt, mine, theirs


def reopen(path, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = Session.open(path, reattach=True, **options)
    return session, [str(w.message) for w in caught]


def test_both_models_come_back_with_their_keys_and_the_active_one(folders, tmp_path):
    path = tmp_path / "two.loom"
    main, prompt, mine, theirs = two_models(folders, path)
    data = load_session(path)
    assert data.model_state == {"active": "g", "attached": [main, "g"]}
    assert data.models["g"]["dtype"] == "float32" and data.models["g"]["quant"] == "none"

    session, notes = reopen(path)
    loom = session.loom
    try:
        assert notes == []
        assert list(loom.models) == [main, "g"] and loom.active_model == "g"
        assert loom.kv_owner == main  # the first model keeps node KV, as before
        assert loom.models["g"].capabilities.node_kv is False
        assert loom.runner is loom.models["g"]
        # The GPT-2 that came back is the one that wrote: the same greedy branch again.
        again = loom.tree.nodes[prompt.id]
        [same] = loom.generate(again, 6)
        assert same.meta["model"] == "g" and same.tokens == theirs.tokens
        [more] = loom.generate(loom.tree.nodes[theirs.id], 3)
        assert more.meta["model"] == "g"
        [other] = loom.generate(again, 6, model=main)
        assert other.meta["model"] == main and other.tokens == mine.tokens
    finally:
        session.close()
    data = load_session(path)
    assert data.tree.nodes[more.id].meta["model"] == "g"
    assert data.model_state["active"] == "g"


def test_a_model_whose_folder_is_gone_is_a_note_and_its_branches_stay(folders, tmp_path):
    path = tmp_path / "two.loom"
    main, prompt, _mine, theirs = two_models(folders, path)
    gpt2 = folders[1]
    kept = shutil.move(gpt2, tmp_path / "kept-gpt2")

    session, notes = reopen(path)
    loom = session.loom
    try:
        [note] = notes
        assert "\n" not in note and "model g (" in note and "was not re-attached" in note
        assert f"its folder {gpt2} is gone" in note and "its branches stay" in note
        assert list(loom.models) == [main] and loom.active_model == main
        assert list(loom.model_table) == [main, "g"]  # recorded: its colour stays
        assert "gone" in loom.model_notes["g"]
        node = loom.tree.nodes[theirs.id]
        assert node.meta["model"] == "g" and node.tokens == theirs.tokens
        [mine_again] = loom.generate(loom.tree.nodes[prompt.id], 2)
        assert mine_again.meta["model"] == main
    finally:
        session.close()
    # Still wanted, and still the one to make active: once the folder is back, the
    # next open brings it back.
    assert load_session(path).model_state == {"active": "g", "attached": [main, "g"]}
    shutil.move(kept, gpt2)
    session, notes = reopen(path)
    try:
        assert notes == [] and list(session.loom.models) == [main, "g"]
        assert session.loom.active_model == "g" and session.loom.model_notes == {}
    finally:
        session.close()


def test_another_model_in_the_folder_is_refused_not_attached(folders, tmp_path):
    path = tmp_path / "two.loom"
    two_models(folders, path)
    shutil.rmtree(folders[1])
    build_tiny_llama(folders[1], seed=5)  # same tokenizer, other weights
    session, notes = reopen(path)
    try:
        [note] = notes
        assert "holds another model" in note and "fingerprint" in note
        assert "g" not in session.loom.models and "g" in session.loom.model_table
    finally:
        session.close()


def test_dtype_and_quant_come_back(folders, tmp_path):
    llama = folders[0]
    other = build_tiny_llama(tmp_path / "models" / "other", seed=1)
    loom = make_loom(llama)
    session = Session.create(loom, tmp_path / "q.loom")
    key = loom.open_model(str(other), "q", quant="int8")
    assert loom.models[key].loaded.quant == "int8"
    loom.generate(loom.append(loom.root, PROMPT), 3, model=key, temperature=0.0)
    session.close()
    assert load_session(tmp_path / "q.loom").models["q"]["quant"] == "int8"
    session, notes = reopen(tmp_path / "q.loom")
    try:
        assert notes == []
        loaded = session.loom.models["q"].loaded
        assert loaded.quant == "int8" and str(loaded.dtype) == "torch.float32"
    finally:
        session.close()


def test_a_detached_model_stays_recorded_and_a_plain_open_keeps_the_state(folders, tmp_path):
    path = tmp_path / "two.loom"
    main, *_ = two_models(folders, path)
    # A plain open (``loomterm generate``) attaches nothing more and forgets nothing.
    plain = Session.open(path)
    assert list(plain.loom.models) == [main]
    plain.loom.generate(plain.loom.root.children[0], 2, temperature=0.0)
    plain.close()
    assert load_session(path).model_state["attached"] == [main, "g"]

    session, _ = reopen(path)
    session.loom.use(main)
    session.loom.detach("g")
    session.close()
    assert load_session(path).model_state == {"active": main, "attached": [main]}
    session, notes = reopen(path)
    try:
        assert notes == [] and list(session.loom.models) == [main]
        assert "g" in session.loom.model_table and session.loom.model_notes == {}
    finally:
        session.close()


def test_a_file_written_before_the_state_was_kept_reattaches_every_model(folders, tmp_path):
    """Files written before ``model_state`` and the records' dtype/quant: every recorded
    model is tried, in the precision its label names."""
    path = tmp_path / "two.loom"
    main, *_ = two_models(folders, path)
    conn = sqlite3.connect(path)
    with conn:
        table = json.loads(
            conn.execute("SELECT value FROM session WHERE key='models'").fetchone()[0]
        )
        for record in table.values():
            record.pop("dtype"), record.pop("quant")
        conn.execute("UPDATE session SET value=? WHERE key='models'", (json.dumps(table),))
        conn.execute("DELETE FROM session WHERE key='model_state'")
    conn.close()
    data = load_session(path)
    assert data.model_state == {} and "dtype" not in data.models["g"]

    session, notes = reopen(path)
    try:
        assert notes == [] and list(session.loom.models) == [main, "g"]
        assert session.loom.active_model == main  # the file did not say
        assert str(session.loom.models["g"].loaded.dtype) == "torch.float32"
    finally:
        session.close()
    data = load_session(path)
    assert data.models["g"]["dtype"] == "float32"  # the records are complete again
    assert data.model_state == {"active": main, "attached": [main, "g"]}


def test_a_moved_folder_attached_again_takes_its_place(folders, tmp_path):
    from loomterm.errors import InputError

    path = tmp_path / "two.loom"
    main, prompt, _mine, theirs = two_models(folders, path)
    moved = shutil.move(folders[1], tmp_path / "moved-gpt2")
    session, [note] = reopen(path)
    loom = session.loom
    try:
        other = build_tiny_llama(tmp_path / "models" / "other", seed=3)
        with pytest.raises(InputError, match="'g' is the key of a recorded model: choose another"):
            loom.open_model(str(other), "g")
        assert loom.open_model(str(moved)) == "g"  # the same fingerprint, elsewhere
        assert list(loom.models) == [main, "g"] and loom.model_notes == {}
        assert loom.model_table["g"]["source"] == str(moved)
        [same] = loom.generate(loom.tree.nodes[prompt.id], 6, model="g")
        assert same.tokens == theirs.tokens
        loom.detach("g")
        assert loom.open_model(str(moved), "g") == "g"  # named by its key: the same
    finally:
        session.close()
    data = load_session(path)
    assert data.models["g"]["source"] == str(moved) and "g" in data.model_state["attached"]


def test_a_gguf_file_comes_back_and_a_gone_one_is_a_note(folders, tmp_path):
    from tests.tiny_gguf import write_llama_gguf

    gguf = write_llama_gguf(folders[0], tmp_path / "models" / "tiny.gguf")
    loom = make_loom(folders[0])
    path = tmp_path / "gguf.loom"
    session = Session.create(loom, path)
    assert loom.open_model(str(gguf), "gg") == "gg"
    [kid] = loom.generate(loom.append(loom.root, PROMPT), 4, model="gg", temperature=0.0)
    session.close()
    session, notes = reopen(path)
    try:
        assert notes == [] and "gg" in session.loom.models
        assert session.loom.model_table["gg"]["source"] == str(gguf)
    finally:
        session.close()
    gguf.unlink()
    session, [note] = reopen(path)
    try:
        assert f"its file {gguf} is gone" in note and "gg" not in session.loom.models
        assert session.loom.tree.nodes[kid.id].meta["model"] == "gg"
    finally:
        session.close()
