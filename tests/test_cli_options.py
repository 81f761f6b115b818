"""The engine options reach the Loom each command builds, wherever they are given.

Every command that loads a model takes ``--model``, ``--device``, ``--dtype``,
``--quant``, ``--n-ctx`` and ``--kv-budget`` before or after its name, and the values reach the
engine: seen on the real ``Loom`` objects built (a spy on ``Loom.__init__`` records
them; the real constructor runs) and in the real ``load_model``'s arguments. Commands
that load no model refuse them.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from loomterm import cli
from loomterm.config.locations import sessions_dir

N_CTX, BUDGET = 64, 3 << 20


def engine_args(model: Path) -> list[list[str]]:
    """The six options, as (flag, value) pairs."""
    return [
        ["--model", str(model)],
        ["--device", "cpu"],
        ["--dtype", "float32"],
        ["--quant", "int8"],
        ["--n-ctx", str(N_CTX)],
        ["--kv-budget", "3M"],
    ]


def placed(model: Path, where: str) -> tuple[list[str], list[str]]:
    """(before the command's name, after it): all before, all after, or split."""
    pairs = engine_args(model)
    cut = {"before": len(pairs), "after": 0, "split": 2}[where]
    return sum(pairs[:cut], []), sum(pairs[cut:], [])


POSITIONS = ["before", "after", "split"]


def spy_engine(monkeypatch) -> SimpleNamespace:
    """Spies on the real engine: every Loom constructed, every load_model call."""
    from loomterm.engine import Loom
    from loomterm.engine.models import load as models

    looms: list = []
    loads: list[dict] = []
    real_init = Loom.__init__
    real_load = models.load_model

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        looms.append(self)

    def load_model(model=None, device="auto", dtype="auto", progress=None, quant="none"):
        loads.append({"model": model, "device": device, "dtype": dtype, "quant": quant})
        return real_load(model, device=device, dtype=dtype, progress=progress, quant=quant)

    monkeypatch.setattr(Loom, "__init__", init)
    monkeypatch.setattr(models, "load_model", load_model)
    return SimpleNamespace(looms=looms, loads=loads)


@pytest.fixture
def built(monkeypatch) -> SimpleNamespace:
    return spy_engine(monkeypatch)


def assert_reached(built, model: Path, looms: int = 1) -> None:
    """Every model loaded and every Loom built got the options given."""
    assert built.loads, "no model was loaded"
    for call in built.loads:
        assert call == {"model": str(model), "device": "cpu", "dtype": "float32", "quant": "int8"}
    assert len(built.looms) >= looms, "no Loom was built"
    for loom in built.looms:
        assert loom.n_ctx == N_CTX
        runner = loom.runner
        assert runner.kv_budget == BUDGET
        assert runner.device == torch.device("cpu") and runner.dtype == torch.float32
        assert runner.loaded.quant == "int8"
        assert Path(runner.loaded.source) == model.resolve()


def run(argv: list[str]) -> int:
    return cli.main([str(a) for a in argv])


def make_session(model: Path, name: str, *more: str) -> Path:
    """A saved session with a little text, made before any spy is on."""
    argv = ["generate", "-s", name, "--model", model, "--device", "cpu", "--prompt", "Hi"]
    assert run([*argv, "--max-new-tokens", "2", *more]) == 0
    return sessions_dir() / f"{name}.loom"


@pytest.fixture
def no_terminal(monkeypatch):
    """The editor path runs up to the terminal check, which fails (as under pytest)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO())


# -- the editor and --prompt (no subcommand) ---------------------------------------------


@pytest.mark.parametrize("where", POSITIONS)
def test_editor_new_session(tiny_llama_dir, built, no_terminal, capsys, where):
    before, after = placed(tiny_llama_dir, where)
    assert run([*before, "-s", "fresh", *after]) == 1
    assert "needs a terminal" in capsys.readouterr().err
    assert_reached(built, tiny_llama_dir)
    assert not (sessions_dir() / "fresh.loom").exists()


@pytest.mark.parametrize("where", POSITIONS)
def test_editor_existing_session(tiny_llama_dir, monkeypatch, no_terminal, capsys, where):
    make_session(tiny_llama_dir, "tale")
    spies = spy_engine(monkeypatch)
    before, after = placed(tiny_llama_dir, where)
    assert run([*before, "-s", "tale", *after]) == 1
    assert "needs a terminal" in capsys.readouterr().err
    assert_reached(spies, tiny_llama_dir)


def test_editor_most_recent_session(tiny_llama_dir, monkeypatch, no_terminal):
    make_session(tiny_llama_dir, "recent")
    spies = spy_engine(monkeypatch)
    before, _ = placed(tiny_llama_dir, "before")
    assert run(before) == 1
    assert_reached(spies, tiny_llama_dir)


@pytest.mark.parametrize("where", POSITIONS)
def test_prompt(tiny_llama_dir, built, capsys, where):
    before, after = placed(tiny_llama_dir, where)
    assert run([*before, "--prompt", "Once upon", "--max-new-tokens", "3", *after]) == 0
    assert capsys.readouterr().out.startswith("Once upon")
    assert_reached(built, tiny_llama_dir)


# -- generate ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", POSITIONS)
def test_generate_new_session(tiny_llama_dir, built, where):
    before, after = placed(tiny_llama_dir, where)
    argv = [*before, "generate", "-s", "new", "--prompt", "Hi", "--max-new-tokens", "2", *after]
    assert run(argv) == 0
    assert_reached(built, tiny_llama_dir)
    assert (sessions_dir() / "new.loom").exists()


@pytest.mark.parametrize("where", POSITIONS)
def test_generate_existing_session(tiny_llama_dir, monkeypatch, where):
    make_session(tiny_llama_dir, "old")
    spies = spy_engine(monkeypatch)
    before, after = placed(tiny_llama_dir, where)
    assert run([*before, "generate", "-s", "old", "--max-new-tokens", "2", *after]) == 0
    assert_reached(spies, tiny_llama_dir)


# -- bench ---------------------------------------------------------------------------------


@pytest.mark.parametrize("where", POSITIONS)
def test_bench(tiny_llama_dir, built, monkeypatch, capsys, where):
    from loomterm.bench import runner

    small = runner.BenchPlan(
        prompt_tokens=16, sibling_tokens=2, sibling_counts=(1,), sections=("siblings",)
    )
    monkeypatch.setattr(runner.BenchPlan, "full", classmethod(lambda cls, device: small))
    before, after = placed(tiny_llama_dir, where)
    assert run([*before, "bench", *after]) == 0
    assert "N=1" in capsys.readouterr().out
    assert_reached(built, tiny_llama_dir)


# -- import --------------------------------------------------------------------------------


@pytest.mark.parametrize("where", POSITIONS)
def test_import(tiny_llama_dir, built, tmp_path, where):
    """Import tokenizes with the model asked for; it builds no Loom, so it says that
    --n-ctx and --kv-budget do nothing there."""
    source = tmp_path / "tree.json"
    tree = {"text": "", "children": [{"text": "The weaver sat at her loom", "children": []}]}
    source.write_text(json.dumps(tree), encoding="utf-8")
    before, after = placed(tiny_llama_dir, where)
    with pytest.warns(UserWarning, match="--n-ctx, --kv-budget has no effect"):
        assert run([*before, "import", source, "--name", "imp", *after]) == 0
    load = {"model": str(tiny_llama_dir), "device": "cpu", "dtype": "float32", "quant": "int8"}
    assert built.loads == [load]
    assert built.looms == []
    assert (sessions_dir() / "imp.loom").exists()


# -- commands that load no model, and bad values ------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sessions", "--model", "x"], "unrecognized arguments: --model x"),
        (["export", "s", "--n-ctx", "5"], "unrecognized arguments: --n-ctx 5"),
        (["--model", "x", "sessions"], "sessions loads no model: --model cannot be given"),
        (["--n-ctx", "5", "--dtype", "float32", "export", "s"], "export loads no model"),
        (["bench", "--n-ctx", "0"], "n_ctx must be a whole number >= 1 or none (got 0)"),
        (["--n-ctx", "lots"], "n_ctx must be a whole number >= 1 or none (got 'lots')"),
        (["generate", "-s", "x", "--temperature", "hot"], "temperature must be a number"),
        (["generate", "-s", "x", "--top-p", "2"], "top_p must be a number in (0, 1] (got 2.0)"),
    ],
)
def test_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_export_and_sessions_still_run_without_options(capsys):
    assert cli.main(["sessions"]) == 0
    assert "no sessions yet" in capsys.readouterr().out


def test_help_lists_the_engine_options_once_per_command(capsys):
    for argv in (["--help"], ["generate", "--help"], ["bench", "--help"], ["import", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        out = capsys.readouterr().out
        for flag in ("--model", "--device", "--dtype", "--n-ctx", "--kv-budget"):
            assert out.count(f"{flag} ") + out.count(f"{flag}\n") >= 1, (argv, flag)


def test_generate_settings_from_the_command_line_override_the_session_s(tiny_llama_dir, capsys):
    """--temperature 0 on two equal sessions gives the same text (the session's own
    temperature, 1, would sample); the sessions keep their settings."""
    from loomterm.sessions.session import load_session

    outs = []
    for name in ("one", "two"):
        make_session(tiny_llama_dir, name, "--temperature", "0")
        capsys.readouterr()
        argv = ["generate", "-s", name, "--model", tiny_llama_dir, "--device", "cpu"]
        assert run([*argv, "--temperature", "0", "--max-new-tokens", "6"]) == 0
        outs.append(capsys.readouterr().out)
        assert load_session(name).settings["temperature"] == 0.8  # the session's own
    assert outs[0] == outs[1] and outs[0].strip()


def test_generate_starts_a_new_session_with_the_editor_s_samplers(tiny_llama_dir):
    """``generate -s NEW`` starts from the llama.cpp preset, as the editor does, not from
    the neutral raw distribution."""
    from loomterm.config.presets import SHIPPED
    from loomterm.sessions.session import load_session

    make_session(tiny_llama_dir, "fresh")
    stored = load_session("fresh").settings
    assert stored["preset"] == "llama.cpp"
    for name, value in SHIPPED["llama.cpp"].items():
        assert stored[name] == value, name


def test_python_dash_m_loomterm_runs_the_cli(tmp_path):
    """``python -m loomterm`` is the ``loomterm`` command (it had no ``__main__``)."""
    import os
    import subprocess

    env = {**os.environ, "LOOMTERM_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "loomterm", "sessions"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "no sessions yet" in done.stdout


def test_generate_says_when_it_makes_a_new_session(tiny_llama_dir, isolated_dirs, capsys):
    """A typo in -s would otherwise start a story silently beside the intended one."""
    from loomterm.cli import main

    args = ["generate", "-s", "fresh", "--model", str(tiny_llama_dir), "--device", "cpu"]
    code = main([*args, "--prompt", "Once", "--max-new-tokens", "2"])
    assert code == 0
    assert "new session 'fresh'" in capsys.readouterr().err
    assert main([*args, "--max-new-tokens", "2"]) == 0  # it exists now: no such line
    assert "new session" not in capsys.readouterr().err
