"""Paths the branch coverage report showed unexercised: cancelling the plain decode
loop mid-way, each reason a KV snapshot is refused (and that a refused one is never
used), a snapshot that cannot be written, and importing a session that already has
tokens. Everything against a recompute, on the tiny seeded Llama."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from loomterm.engine.models import load as models_mod
from loomterm.errors import SessionError
from loomterm.sessions.kv_snapshot import load_kv_snapshot, save_kv_snapshot
from loomterm.sessions.session import (
    close_session,
    import_session,
    load_session,
    open_loom,
    save_loom,
    session_path,
    snapshot_path,
)
from tests.helpers import assert_matches_recompute, make_loom, reference_logits

PROMPT = "Once upon a time, in a land far away, there lived"


# -- cancelling the plain decode loop ------------------------------------------------------------
@pytest.mark.parametrize("n, drafting", [(3, "auto"), (1, "off")])
def test_cancel_mid_way_keeps_the_tokens_so_far_exact(tiny_llama_dir, n, drafting):
    """``n > 1`` (or drafting off) takes the plain loop. Cancelled after the second
    step's first token, every row still gets that step's token (the check is per
    step), and each child is the same seed's full generation cut short."""
    loom = make_loom(tiny_llama_dir)
    # Healing would back up " lived" and make both generations' first tokens the healed
    # ones; the cut this test counts is the plain loop's (healing is cancelled in its tests).
    loom.update_settings(token_healing="off")
    node = loom.append(loom.root, PROMPT)
    full = loom.generate(node, 12, n=n, temperature=1.0, seed=4, drafting=drafting)
    assert all(len(kid.tokens) == 12 for kid in full)  # no end token: the cut is the cancel
    cancel = threading.Event()
    seen: list[tuple[int, int]] = []

    def on_token(child, token, piece):
        seen.append((child.id, token))
        if len(seen) == n + 1:
            cancel.set()

    kids = loom.generate(
        node, 12, n=n, temperature=1.0, seed=4, drafting=drafting, on_token=on_token, cancel=cancel
    )
    assert [len(kid.tokens) for kid in kids] == [2] * n
    for kid, whole in zip(kids, full):
        assert kid.tokens == whole.tokens[:2]
        assert kid.logprobs == pytest.approx(whole.logprobs[:2], abs=1e-5)
        assert_matches_recompute(loom, kid)
    assert [token for _, token in seen] == [kid.tokens[i] for i in range(2) for kid in kids]
    # The cache is left in a state the next generation continues from exactly.
    (more,) = loom.generate(kids[-1], 3, temperature=0)
    assert_matches_recompute(loom, more)


# -- KV snapshots: what is refused ----------------------------------------------------------------
@pytest.fixture
def snapshotted(tiny_llama_dir, tmp_path):
    """A saved session with a KV snapshot, the cursor's logits, and the session closed."""
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "snap.loom"
    prompt = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(prompt, 6, temperature=0)
    loom.cursor = kid
    save_loom(loom, path, kv_snapshot=True)
    logits = loom.next_logits(kid)
    close_session(loom)
    return path, logits


def rewrite_snapshot(path: Path, **changes: str | None) -> None:
    """Change (None: remove) metadata entries of the snapshot beside ``path``."""
    target = snapshot_path(path)
    with safe_open(str(target), framework="pt") as handle:
        meta = dict(handle.metadata())
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    save_file(tensors, str(target), metadata=meta)


def open_with_warnings(path: Path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loom = open_loom(path, device="cpu", dtype="float32")
    return loom, [str(w.message) for w in caught]


def test_a_good_snapshot_puts_the_kv_back_before_any_compute(snapshotted):
    path, logits = snapshotted
    loom, caught = open_with_warnings(path)
    try:
        assert caught == []
        path_nodes = [n for n in loom.cursor.path() if n.tokens]
        assert all(n.kv is not None and n.kv.shape[3] == len(n.tokens) for n in path_nodes)
        assert (loom.next_logits(loom.cursor) - logits).abs().max().item() < 1e-4
        assert_matches_recompute(loom, loom.cursor)
    finally:
        close_session(loom)


@pytest.mark.parametrize(
    "changes, why",
    [
        ({"format": "someone-else"}, "not a loomterm KV snapshot of this version"),
        ({"format": None}, "not a loomterm KV snapshot of this version"),
        ({"version": "2"}, "not a loomterm KV snapshot of this version"),
        ({"dtype": "bfloat16"}, "made in bfloat16, not float32"),
        ({"quant": "int8"}, "made with quant int8, not none"),
        ({"nodes": "[[1, 3, "}, "unreadable ("),
        ({"nodes": "[]"}, "its token path no longer matches the session"),
    ],
)
def test_a_refused_snapshot_is_named_and_never_used(snapshotted, changes, why):
    path, logits = snapshotted
    rewrite_snapshot(path, **changes)
    loom, caught = open_with_warnings(path)
    try:
        warning = f"ignoring KV snapshot snap.kv.safetensors: {why}"
        assert len(caught) == 1 and "\n" not in caught[0]
        assert caught[0].startswith(warning) if why.endswith("(") else caught[0] == warning
        assert all(n.kv is None for n in loom.tree.nodes.values())  # nothing taken from it
        got = loom.next_logits(loom.cursor)
        assert (got - reference_logits(loom, loom.tokens(loom.cursor))).abs().max().item() < 1e-4
        assert (got - logits).abs().max().item() < 1e-4
    finally:
        close_session(loom)


def test_a_snapshot_that_is_not_safetensors_is_unreadable(snapshotted):
    path, logits = snapshotted
    snapshot_path(path).write_bytes(b"\x00garbage" * 10)
    loom, caught = open_with_warnings(path)
    try:
        assert len(caught) == 1 and caught[0].startswith(
            "ignoring KV snapshot snap.kv.safetensors: unreadable ("
        )
        assert (loom.next_logits(loom.cursor) - logits).abs().max().item() < 1e-4
    finally:
        close_session(loom)


def test_a_snapshot_missing_a_node_s_tensor_is_unreadable(snapshotted):
    path, logits = snapshotted
    target = snapshot_path(path)
    with safe_open(str(target), framework="pt") as handle:
        meta = dict(handle.metadata())
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    tensors.pop(sorted(tensors)[-1])
    save_file(tensors, str(target), metadata=meta)
    loom, caught = open_with_warnings(path)
    try:
        assert len(caught) == 1 and "unreadable" in caught[0]
        assert all(n.kv is None for n in loom.tree.nodes.values())
        assert (loom.next_logits(loom.cursor) - logits).abs().max().item() < 1e-4
    finally:
        close_session(loom)


def test_a_node_shorter_than_its_snapshot_is_skipped(tiny_llama_dir, snapshotted):
    """Entries for nodes that are gone, or shorter than the KV stored, are skipped one by
    one; the others still load."""
    path, logits = snapshotted
    loom = open_loom(path, device="cpu", dtype="float32", kv_snapshot=False)
    try:
        ids = [n.id for n in loom.cursor.path() if n.tokens]
        for node in loom.tree.nodes.values():
            node.kv = None
        kid = loom.tree.nodes[ids[-1]]
        del kid.tokens[-1], kid.logprobs[-1], kid.top[-1]  # behind the engine's back
        assert load_kv_snapshot(loom, snapshot_path(path)) is True
        assert loom.tree.nodes[ids[0]].kv is not None and kid.kv is None
        kid.tokens = []
        loom.tree.nodes.pop(ids[-1])
        kid.parent.children.remove(kid)
        assert load_kv_snapshot(loom, snapshot_path(path)) is True
    finally:
        close_session(loom)


def test_a_snapshot_that_cannot_be_written_is_a_one_line_error(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    loom.cursor = loom.append(loom.root, PROMPT)
    path = tmp_path / "blocked.loom"
    save_loom(loom, path)
    snapshot_path(path).mkdir()  # a folder where the file would go
    try:
        with pytest.raises(SessionError) as info:
            save_kv_snapshot(loom, path)
        message = str(info.value)
        assert message.startswith("cannot write KV snapshot ") and "\n" not in message
        assert snapshot_path(path).is_dir() and not any(snapshot_path(path).iterdir())
        assert not list(tmp_path.glob(".*.tmp"))  # no half-written file left beside it
    finally:
        close_session(loom)


# -- importing a session that has tokens ------------------------------------------------------------
@pytest.fixture
def saved(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    prompt = loom.append(loom.root, PROMPT)
    loom.cursor = loom.generate(prompt, 5, n=2, temperature=0.8, seed=3)[1]
    save_loom(loom, tmp_path / "orig.loom")
    close_session(loom)
    return load_session(tmp_path / "orig.loom")


def _same_session(a, b) -> None:
    assert a.cursor == b.cursor and a.path_text() == b.path_text()
    assert a.model == b.model and a.settings == b.settings
    for node in a.tree.nodes.values():
        other = b.tree.nodes[node.id]
        assert (other.tokens, other.logprobs, other.top) == (node.tokens, node.logprobs, node.top)
        assert b.pieces[node.id] == a.pieces[node.id]


def test_a_tree_with_tokens_is_imported_as_is_without_a_model(saved, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("import loaded a model it did not need")

    monkeypatch.setattr(models_mod, "load_model", no_model)
    data = import_session(saved, "copy")
    _same_session(saved, data)
    assert session_path("copy").exists() and load_session("copy").path_text() == saved.path_text()


def test_importing_with_the_same_model_keeps_the_tokens(saved, tiny_llama_dir):
    data = import_session(saved, "same", model=str(tiny_llama_dir), device="cpu", dtype="float32")
    _same_session(saved, data)


def test_importing_onto_an_existing_session_is_refused_untouched(saved):
    import_session(saved, "taken")
    before = session_path("taken").read_bytes()
    with pytest.raises(SessionError, match=r"^a session already exists at .*taken\.loom; choose"):
        import_session(saved, "taken")
    assert session_path("taken").read_bytes() == before


def test_an_imported_session_opens_and_continues_exactly(saved, tiny_llama_dir):
    import_session(saved, "goes-on")
    loom = open_loom("goes-on", device="cpu", dtype="float32")
    try:
        assert loom.text(loom.cursor) == saved.path_text()
        assert_matches_recompute(loom, loom.cursor)
        assert torch.isfinite(loom.next_logits(loom.cursor)).all()
    finally:
        close_session(loom)
