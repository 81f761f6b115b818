"""One road from a model source to a runner (``engine.open``): every place that opens a
model (``Loom.load``, a new session, a reopened one, ``--attach``, a reattached model,
the bench) gives the same runner kind and settings for the same options, and ``auto``
picks the backend the file wants. The editor's Attach model is in
tests/tui/test_models_open.py; llama.cpp's side in tests/llamacpp/test_open_roads.py."""

from __future__ import annotations

import pytest
import torch

from loomterm.config.settings import EngineOptions
from loomterm.engine import Loom
from loomterm.engine.open import RunnerOptions, choose_backend, open_runner
from loomterm.errors import InputError
from tests.tiny_models import build_tiny_llama

OTHER_THREADS = 3  # what torch is set to before each road: a road that drops --threads shows


def settings(runner) -> dict:
    """What the options decide about a runner."""
    options = runner.options
    return {
        "kind": type(runner).__name__,
        "backend": runner.backend,
        "threads": runner.threads,
        "precision": getattr(runner, "precision", None),
        "quant": None if options is None else options.quant,
    }


@pytest.fixture
def threads_back():
    """Give torch its threads back after the test (they are process-wide)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def roads(model: str, engine: EngineOptions, base_model: str, tmp_path) -> dict[str, dict]:
    """The settings of the runner each road opens ``model`` with ``engine``'s options."""
    from loomterm.cli.attach import attach_more
    from loomterm.sessions.opening import SessionOpening
    from loomterm.sessions.session import Session, close_session, open_loom, save_loom

    found: dict[str, dict] = {}

    def road(name: str, runner) -> None:
        found[name] = settings(runner)

    torch.set_num_threads(OTHER_THREADS)
    loom = Loom.load(**engine.load_kwargs())
    road("Loom.load", loom.runner)
    close_session(loom)

    torch.set_num_threads(OTHER_THREADS)
    path = tmp_path / "new.loom"
    opening = SessionOpening(path, engine)
    loom = opening.finish()
    road("new session", loom.runner)
    close_session(loom)

    torch.set_num_threads(OTHER_THREADS)
    loom = open_loom(path, **engine.load_kwargs())
    road("reopened session", loom.runner)
    close_session(loom)

    # --attach: beside a session on another model with the same tokenizer.
    base = engine.replace(model=base_model)
    torch.set_num_threads(OTHER_THREADS)
    loom = Loom.load(**base.replace(threads=1).load_kwargs())
    torch.set_num_threads(OTHER_THREADS)
    (key,) = attach_more(loom, [("m", model)], engine, lambda *a: None, quiet=True)
    road("--attach", loom.models[key])
    session = tmp_path / "two.loom"
    save_loom(loom, session)
    close_session(loom)

    torch.set_num_threads(OTHER_THREADS)
    reopened = Session.open(session, **base.load_kwargs(), reattach=True)
    road("reattached", reopened.loom.models["m"])
    close_session(reopened.loom)
    return found


def test_every_road_opens_the_same_runner(tiny_llama_dir, tmp_path, threads_back):
    other = build_tiny_llama(tmp_path / "other", seed=3)
    # Two threads: neither the test run's default (OMP_NUM_THREADS=1) nor OTHER_THREADS.
    engine = EngineOptions(model=str(tiny_llama_dir), device="cpu", quant="int8", threads=2)
    found = roads(str(tiny_llama_dir), engine, str(other), tmp_path)
    want = {
        "kind": "LocalRunner",
        "backend": "torch",
        "threads": 2,
        "precision": "int8 (float32)",
        "quant": "int8",
    }
    assert found == {name: want for name in found}
    assert len(found) == 5


def test_the_bench_opens_by_the_same_road(tiny_llama_dir, monkeypatch, threads_back):
    """``loomterm bench --threads 1 --quant int8``: the model it measures is loaded with
    those options (the bench's own plan is replaced by a record of what it got)."""
    from loomterm import cli
    from loomterm.bench import runner as bench_runner
    from loomterm.bench.report import Row

    got = {}

    def record(loaded, plan, quick=False, log=None, **options):
        got.update(quant=loaded.quant, threads=torch.get_num_threads(), options=options)
        meta = {"model": "m", "device": "cpu", "dtype": "f", "torch": "t", "threads": 1}
        row = Row("Recorded", "what the bench got", 1.0, 1.0, "x", 1.0)
        return bench_runner.BenchResult([row], {**meta, "seconds": 0})

    monkeypatch.setattr(bench_runner, "run_bench", record)
    torch.set_num_threads(OTHER_THREADS)
    args = ["bench", "--model", str(tiny_llama_dir), "--threads", "1", "--quant", "int8"]
    assert cli.main([*args, "--n-ctx", "256"]) == 0
    assert got == {"quant": "int8", "threads": 1, "options": {"n_ctx": 256, "kv_budget": None}}


def test_default_threads_leave_a_core_free(tiny_llama_dir, monkeypatch, threads_back):
    """No --threads and no OMP_NUM_THREADS: a thread per physical core less one."""
    from loomterm.engine.threads import physical_cores

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(OTHER_THREADS)
    runner = open_runner(str(tiny_llama_dir), RunnerOptions(device="cpu"))
    assert runner.threads == max(1, physical_cores() - 1) != OTHER_THREADS
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's own choice wins
    assert open_runner(str(tiny_llama_dir), RunnerOptions(device="cpu")).threads == 2


def test_auto_picks_llama_cpp_for_a_gguf_only_where_it_is_built(tmp_path, monkeypatch):
    """``auto``: a .gguf file on llama.cpp when its library is here, on torch otherwise;
    a folder and the default model on torch; a session's recorded backend kept; a URL
    its own backend."""
    from loomterm.engine import open as opener

    gguf = str(tmp_path / "m.gguf")
    monkeypatch.setattr(opener, "llama_available", lambda: True)
    assert choose_backend(gguf) == "llama.cpp"
    assert choose_backend(gguf, recorded="torch") == "torch"
    assert choose_backend(gguf, "torch") == "torch"
    assert choose_backend(str(tmp_path)) == "torch"
    assert choose_backend(None) == "torch"
    monkeypatch.setattr(opener, "llama_available", lambda: False)
    assert choose_backend(gguf) == "torch"
    assert choose_backend(gguf, recorded="llama.cpp") == "llama.cpp"
    assert choose_backend("http://127.0.0.1:1") == "server"
    with pytest.raises(InputError, match="a server URL is its own backend"):
        choose_backend("http://127.0.0.1:1", "torch")
    with pytest.raises(InputError, match="use one of auto, torch, llama.cpp"):
        RunnerOptions(backend="onnx")


def test_server_options_with_a_local_model_are_one_line(tiny_llama_dir):
    with pytest.raises(InputError, match="server_kind: only for a server URL"):
        Loom.load(str(tiny_llama_dir), server_kind="vllm")


def test_a_runner_computes_with_its_threads_on_any_thread(tiny_llama_dir, threads_back):
    """OpenMP keeps torch's thread count per thread: the editor opens a model on one
    thread and generates on its worker. The runner sets its own count when it runs."""
    import threading

    loom = Loom.load(str(tiny_llama_dir), device="cpu", threads=2)
    seen = []

    def work() -> None:
        torch.set_num_threads(OTHER_THREADS)
        with loom.exclusive():
            seen.append(torch.get_num_threads())
        loom.generate(loom.append(loom.root, "Once"), 2, temperature=0)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == [2] and loom.runner.threads == 2


def test_generate_names_the_backend(tiny_llama_dir, capsys, threads_back):
    """``loomterm generate``: one line on stderr says what runs the model."""
    from loomterm.cli import main

    args = ["generate", "-s", "g", "--model", str(tiny_llama_dir), "--device", "cpu"]
    assert main([*args, "--threads", "1", "--prompt", "Once", "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert f"loomterm: {tiny_llama_dir.name} on cpu · torch (1 thread)\n" in err


def test_a_new_session_on_the_model_in_memory_keeps_its_threads(tiny_llama_dir, threads_back):
    """The editor's new session (``ops.new_session_like``) runs the same model with the
    same threads and options, whatever the thread that makes it has."""
    from loomterm.tui import ops

    loom = Loom.load(str(tiny_llama_dir), device="cpu", threads=2, n_ctx=256)
    torch.set_num_threads(OTHER_THREADS)
    fresh, _name = ops.new_session_like(loom)
    assert fresh.runner is not loom.runner and fresh.runner.loaded is loom.runner.loaded
    assert settings(fresh.runner) == settings(loom.runner) and fresh.n_ctx == 256
