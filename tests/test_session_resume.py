"""Resume exactly: a session reopened in a new process continues as if never closed.

Each test builds a session, notes the next-token logits at the cursor and a greedy
continuation (made after detaching the file, so the file does not see it), then opens
the file in a fresh interpreter (``tests.resume_child``) and compares.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from loomterm.engine import Loom
from loomterm.errors import SessionError
from loomterm.sessions.session import (
    close_session,
    load_session,
    open_loom,
    save_loom,
    session_of,
    snapshot_path,
)
from loomterm.store import ModelMismatchError, SessionLockedError
from tests.helpers import make_loom

REPO = Path(__file__).resolve().parents[1]
LOGIT_TOL = 1e-4  # float32 noise


def run_child(session: Path, tmp_path: Path, *extra: str, greedy: int = 16) -> dict:
    out = tmp_path / f"child-{len(list(tmp_path.glob('child-*')))}.pt"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.resume_child",
            str(session),
            str(out),
            "--greedy",
            str(greedy),
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


def reference(loom: Loom, greedy: int = 16) -> tuple[torch.Tensor, list[int]]:
    """Logits at the cursor, and a greedy continuation made off the record."""
    logits = loom.next_logits(loom.cursor)
    close_session(loom)  # detach first: this continuation must not reach the file
    tokens = loom.generate(loom.cursor, greedy, n=1, temperature=0.0)[0].tokens
    return logits, tokens


def busy_session(loom: Loom, path: Path) -> None:
    """A session with branches, a split, a picked alternative and edits, some of them
    made after the first save (so they arrive through streaming)."""
    prompt = loom.append(loom.root, "Once upon a time, in a land far away,")
    kids = loom.generate(prompt, 12, n=3, temperature=0.9, seed=11)
    loom.cursor = kids[1]
    save_loom(loom, path)
    more = loom.generate(kids[1], 10, n=2, temperature=0.7, seed=5)
    loom.truncate(more[0], prompt.end + 4)  # splits kids[1]
    holder, offset = loom.tree.locate(more[0], prompt.end + 2)
    runner_up = holder.top[offset][1][0]  # the second-best token there
    picked = loom.pick(more[0], prompt.end + 2, runner_up)
    typed = loom.append(picked, " the weaver said")
    tail = loom.generate(typed, 8, n=1, temperature=0.0)[0]
    loom.cursor = tail


def assert_same_text_on_disk(loom: Loom, path: Path) -> None:
    data = load_session(path)
    assert data.cursor == loom.cursor.id
    for node in loom.tree.nodes.values():
        stored = data.tree.nodes[node.id]
        assert stored.tokens == node.tokens
        assert stored.logprobs == pytest.approx(node.logprobs)
    assert data.path_text() == loom.text(loom.cursor)


# -- tiny llama -----------------------------------------------------------------------


def test_resume_in_a_new_process_is_exact(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "resume.loom"
    busy_session(loom, path)
    assert_same_text_on_disk(loom, path)
    logits, greedy = reference(loom)
    child = run_child(path, tmp_path)
    diff = (child["logits"] - logits).abs().max().item()
    assert diff < LOGIT_TOL, diff
    assert child["greedy"] == greedy
    assert child["prefill_tokens"] == loom.cursor.end  # no snapshot: KV rebuilt lazily


def test_resume_keeps_settings_and_cursor(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "settings.loom"
    save_loom(loom, path)
    node = loom.append(loom.root, "Hello there")
    loom.update_settings(temperature=0.25, splice_mode="exact")
    loom.cursor = node
    close_session(loom)
    again = open_loom(path, device="cpu", dtype="float32")
    try:
        assert again.settings.temperature == 0.25
        assert again.settings.splice_mode == "exact"
        assert again.cursor.id == node.id
        assert again.tree._next_id == loom.tree._next_id
        assert again.runner.loaded.fingerprint == loom.runner.loaded.fingerprint
    finally:
        close_session(again)


def test_long_paths_report_prefill_progress(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "long.loom"
    loom.append(loom.root, "The quick brown fox jumps over the lazy dog. " * 80)
    loom.cursor = loom.root.children[0]
    save_loom(loom, path)
    close_session(loom)
    reports = []
    again = open_loom(path, device="cpu", dtype="float32", progress=lambda *r: reports.append(r))
    try:
        again.next_logits(again.cursor)
    finally:
        close_session(again)
    assert reports and reports[-1][0] == "prefill" and reports[-1][1] == reports[-1][2]


# -- KV snapshots ---------------------------------------------------------------------


def test_a_kv_snapshot_gives_identical_logits_with_no_prefill(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "snap.loom"
    busy_session(loom, path)
    session_of(loom).save_snapshot()
    assert snapshot_path(path).exists()
    logits, greedy = reference(loom)
    child = run_child(path, tmp_path)
    assert child["warnings"] == []
    assert child["prefill_tokens"] <= 1  # only the last token, for its logits
    assert (child["logits"] - logits).abs().max().item() < LOGIT_TOL
    assert child["greedy"] == greedy


def test_a_snapshot_keeps_approximate_kv_and_without_it_kv_is_exact(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "approx.loom"
    prompt = loom.append(loom.root, "Once upon a time, in a land far away, there lived")
    body = loom.generate(prompt, 24, n=1, temperature=0.0)[0]
    spliced = loom.splice(body, 3, 5, " long ago", exact=False)
    assert not loom.is_exact(spliced)
    loom.cursor = spliced
    save_loom(loom, path, kv_snapshot=True)
    approx_logits, greedy = reference(loom)
    fresh = make_loom(tiny_llama_dir)  # a fresh engine computes the same tokens exactly
    exact = fresh.next_logits(fresh.append_tokens(fresh.root, loom.tokens(spliced)))
    assert (exact - approx_logits).abs().max().item() > LOGIT_TOL  # the test can tell

    with_snapshot = run_child(path, tmp_path)
    assert (with_snapshot["logits"] - approx_logits).abs().max().item() < LOGIT_TOL
    assert with_snapshot["greedy"] == greedy
    assert with_snapshot["approx"]  # still flagged: the re-rotated KV came back

    snapshot_path(path).unlink()
    without = run_child(path, tmp_path)
    assert (without["logits"] - exact).abs().max().item() < LOGIT_TOL
    assert without["approx"] == []  # recomputed, so nothing is approximate any more


def test_a_snapshot_from_another_model_is_ignored_with_a_warning(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "stale.loom"
    busy_session(loom, path)
    target = session_of(loom).save_snapshot()
    logits, greedy = reference(loom)
    with safe_open(str(target), framework="pt") as handle:
        meta = dict(handle.metadata())
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    meta["fingerprint"] = meta["fingerprint"].replace('"weights": "', '"weights": "0')
    save_file(tensors, str(target), metadata=meta)
    child = run_child(path, tmp_path)
    assert any("another model" in w for w in child["warnings"])
    assert child["prefill_tokens"] == loom.cursor.end
    assert (child["logits"] - logits).abs().max().item() < LOGIT_TOL
    assert child["greedy"] == greedy


def test_a_snapshot_of_a_path_that_changed_is_not_used(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "moved.loom"
    node = loom.append(loom.root, "Alpha beta gamma delta")
    loom.cursor = node
    save_loom(loom, path)
    session_of(loom).save_snapshot()
    # The file is rewritten with other tokens under the same node id.
    other = make_loom(tiny_llama_dir)
    swapped = other.append(other.root, "Zeta eta theta iota kappa")
    other.cursor = swapped
    close_session(loom)
    save_loom(other, path)
    logits = other.next_logits(swapped)
    close_session(other)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = open_loom(path, device="cpu", dtype="float32")
    try:
        assert any("no longer matches" in str(w.message) for w in caught)
        assert (again.next_logits(again.cursor) - logits).abs().max().item() < LOGIT_TOL
    finally:
        close_session(again)


# -- refusals -------------------------------------------------------------------------


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_another_model_is_refused_then_read_only_or_retokenized(
    tiny_llama_dir, tiny_gpt2_dir, tmp_path
):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "mismatch.loom"
    node = loom.append(loom.root, "The quick brown fox")
    kid = loom.generate(node, 6, n=1, temperature=0.0)[0]
    loom.cursor = kid
    save_loom(loom, path)
    text = loom.text(kid)
    close_session(loom)
    before = sha(path)

    with pytest.raises(ModelMismatchError) as info:
        open_loom(path, model=str(tiny_gpt2_dir), device="cpu", dtype="float32")
    message = str(info.value)
    assert "\n" not in message and "read-only" in message and "re-tokenize" in message
    assert sha(path) == before

    view = open_loom(path, model=str(tiny_gpt2_dir), device="cpu", dtype="float32", read_only=True)
    assert view.text(view.cursor) == text  # its own token ids, from the new tokenizer
    view.append(view.cursor, " more")  # changes stay in memory
    close_session(view)
    assert sha(path) == before

    moved = open_loom(
        path, model=str(tiny_gpt2_dir), device="cpu", dtype="float32", retokenize=True
    )
    try:
        assert moved.text(moved.cursor) == text
        assert moved.runner.loaded.fingerprint != loom.runner.loaded.fingerprint
        assert all(lp is None for n in moved.tree.nodes.values() for lp in n.logprobs)
    finally:
        close_session(moved)
    backups = list(tmp_path.glob("mismatch.loom.*.bak"))
    assert len(backups) == 1 and sha(backups[0]) == before
    assert load_session(path).model["fingerprint"] == moved.runner.loaded.fingerprint


def test_a_session_open_elsewhere_is_refused_or_read_only(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "busy.loom"
    loom.append(loom.root, "Hello")
    save_loom(loom, path)  # stays attached: this process holds the session
    try:
        with pytest.raises(SessionLockedError, match="in use"):
            open_loom(path, device="cpu", dtype="float32")
        view = open_loom(path, device="cpu", dtype="float32", read_only=True)
        assert view.tree.nodes.keys() == loom.tree.nodes.keys()
        close_session(view)
    finally:
        close_session(loom)


def test_a_missing_session_names_close_matches(tiny_llama_dir):
    loom = make_loom(tiny_llama_dir)
    save_loom(loom, "weaver")
    close_session(loom)
    with pytest.raises(SessionError, match="close matches: weaver"):
        open_loom("weavr", device="cpu", dtype="float32")


# -- the default model ----------------------------------------------------------------


@pytest.mark.default_model
def test_default_model_resume_is_exact(tmp_path, capsys):
    loom = Loom.load(device="cpu", dtype="float32")
    path = tmp_path / "smol.loom"
    chat = "<|im_start|>user\nWrite a short poem about weaving.<|im_end|>\n<|im_start|>assistant\n"
    prompt = loom.append(loom.root, chat, role="user")
    kids = loom.generate(prompt, 24, n=2, temperature=0.8, seed=1)
    loom.cursor = kids[0]
    save_loom(loom, path)
    more = loom.generate(kids[0], 16, n=1, temperature=0.0)[0]
    loom.cursor = more
    logits, greedy = reference(loom, greedy=24)
    child = run_child(path, tmp_path, greedy=24)
    diff = (child["logits"] - logits).abs().max().item()
    with capsys.disabled():
        print(
            f"\n[default model resume] max |logit diff| {diff:.2e}, greedy tokens identical: "
            f"{child['greedy'] == greedy}, path {child['path_tokens']} tokens"
        )
    assert diff < LOGIT_TOL
    assert child["greedy"] == greedy

    # And through a KV snapshot.
    loom2 = open_loom(path, device="cpu", dtype="float32")
    session_of(loom2).save_snapshot()
    close_session(loom2)
    snap = run_child(path, tmp_path, greedy=24)
    assert snap["prefill_tokens"] <= 1
    assert (snap["logits"] - logits).abs().max().item() < LOGIT_TOL
    assert snap["greedy"] == greedy
