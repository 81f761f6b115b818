"""Shared fixtures: isolated loomterm folders and tiny seeded models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loomterm.config import locations
from tests.tiny_models import build_tiny_gpt2, build_tiny_llama


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory, monkeypatch):
    """Keep sessions and config of each test apart; share the model cache (it is slow to
    fill and read-only once made)."""
    base = tmp_path_factory.mktemp("loomterm")
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(base / "data"))
    monkeypatch.setenv("LOOMTERM_CONFIG_DIR", str(base / "config"))
    (base / "documents").mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("LOOMTERM_DOCUMENTS_DIR", str(base / "documents"))
    if "LOOMTERM_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(locations.test_cache_dir()))
    return base


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    return build_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


# The fast lane, ``pytest -m "not slow"`` (docs/development.md): the unit layer. Marked
# ``slow`` here, in one place: the editor's tests (Pilot, snapshots, tmux), the servers'
# (tests/remote/, tests/llamacpp/), those on the real default model (``default_model``), and the files
# and tests below, each measured at over a few seconds. CI runs everything.
SLOW_FOLDERS = ("tests/tui/", "tests/remote/", "tests/llamacpp/")
SLOW_FILES = frozenset(
    {
        "tests/engine/test_draft_sources.py",
        "tests/engine/test_drafting.py",
        "tests/engine/test_injected_context.py",
        "tests/engine/test_injected_generation.py",
        "tests/engine/test_samplers_in_the_loom.py",
        "tests/engine/test_state_machine.py",
        "tests/engine/test_step.py",
        "tests/engine/test_tidy_machine.py",
        "tests/engine/test_weave.py",
        "tests/engine/test_window_switch.py",
        "tests/engine/test_zoo.py",
        "tests/test_bad_environment.py",
        "tests/test_bench.py",
        "tests/test_cli_attach.py",
        "tests/test_cli_options.py",
        "tests/test_cli_weave.py",
        "tests/test_crash.py",
        "tests/test_default_model.py",
        "tests/test_fuzz_cli.py",
        "tests/test_fuzz_import.py",
        "tests/test_models.py",
        "tests/test_model_support.py",
        "tests/test_models_session.py",
        "tests/test_packaging.py",
        "tests/test_ratings_export.py",
        "tests/test_reattach.py",
        "tests/test_require_all.py",
        "tests/test_session_resume.py",
        "tests/test_snapshot_and_import.py",
        "tests/test_startup_light.py",
        "tests/test_tidy_session.py",
    }
)
SLOW_TESTS = frozenset(
    {
        "tests/engine/test_budget.py::test_many_branches_stay_under_a_small_cap",
        "tests/engine/test_context.py::test_generation_runs_past_n_ctx",
        "tests/engine/test_draft_table.py::test_sampled_regenerations_accept_table_drafts_and_keep_the_text",
        "tests/engine/test_draft_table.py::test_table_near_reads_the_path_tail_and_the_branches",
        "tests/engine/test_fused.py::test_a_fused_model_forwards_as_before",
        "tests/engine/test_fused.py::test_a_fused_product_is_the_parts_products_bit_for_bit",
        "tests/engine/test_injected_splice.py::test_fast_splice_near_the_top_moves_the_suffix",
        "tests/engine/test_kvcache.py::test_node_kv_stays_exact_through_a_context_shift",
        "tests/engine/test_kvcache.py::test_node_kv_stays_exact_through_every_operation",
        "tests/engine/test_kvcache.py::test_resident_kv_after_siblings_is_near_the_ideal",
        "tests/engine/test_operations.py::test_n_siblings_run_as_one_batch_over_a_shared_prefix",
        "tests/engine/test_operations.py::test_pick_makes_a_branch_without_a_forward_pass",
        "tests/engine/test_operations.py::test_switching_branches_reuses_cached_kv",
    }
)


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        path, _, name = item.nodeid.partition("::")
        test = f"{path}::{name.split('[')[0]}"
        if (
            path.startswith(SLOW_FOLDERS)
            or path in SLOW_FILES
            or test in SLOW_TESTS
            or item.get_closest_marker("default_model")
            or item.get_closest_marker("gemma")
        ):
            item.add_marker(slow)


def pytest_terminal_summary(terminalreporter):
    """Report the worst logit difference against a full recompute seen in this run."""
    from tests.helpers import WORST

    if WORST["checks"]:
        terminalreporter.write_line(
            f"recompute checks: {WORST['checks']}, worst relative logit difference "
            f"{WORST['relative']:.2e}"
        )


@pytest.fixture(scope="session")
def test_cache_dir():
    """The test cache (as ``isolated_dirs`` sets it), for session fixtures, which run
    before that function-scoped one (tests/remote and tests/llamacpp build into it)."""
    folder = os.environ.get("LOOMTERM_CACHE_DIR") or str(locations.test_cache_dir())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOOMTERM_CACHE_DIR", folder)
        yield Path(folder)


@pytest.fixture(scope="session")
def gemma_gguf(test_cache_dir) -> Path:
    """Gemma 3 270M's GGUF file (a tokenizer that adds ``<bos>``), fetched into the test
    cache once (``models.shipped``); skips with the reason where it cannot be."""
    from loomterm.engine.models.shipped import GEMMA3_270M
    from loomterm.errors import LoomError
    from tests.helpers import require_or_skip

    try:
        return GEMMA3_270M.gguf_path()
    except LoomError as exc:
        require_or_skip(False, f"no Gemma 3 270M: {exc}")
        raise AssertionError("unreachable") from None


@pytest.fixture(scope="session")
def gemma_dir(gemma_gguf) -> Path:
    """Gemma 3 270M converted for the torch runner (about a minute, once per cache)."""
    from loomterm.engine.models.shipped import GEMMA3_270M

    return GEMMA3_270M.model_dir()
