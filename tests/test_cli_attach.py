"""``loomterm --attach [NAME=]MODEL`` (repeatable): more models in the editor's session
from the start, beside the ones a reopened session brings back itself; bad values are
one line, with no traceback and no session file left behind."""

from __future__ import annotations

import pytest

from loomterm import cli
from loomterm.cli import run as cli_run
from loomterm.config.locations import sessions_dir
from loomterm.sessions.session import close_session, load_session
from tests.tiny_models import build_tiny_llama, build_tokenizer


def editor_args(*argv):
    return cli.build_parser().parse_args([str(a) for a in argv])


@pytest.fixture
def terminal(monkeypatch):
    """The editor's start runs as on a terminal (the app itself is not run)."""
    monkeypatch.setattr(cli_run, "require_terminal", lambda: None)


def test_values_parse_as_name_and_model():
    args = editor_args(
        "--attach", "g=/models/gpt2", "--attach", "http://127.0.0.1:8080/v1?x=1", "--attach", "a/b"
    )
    assert args.attach == [("g", "/models/gpt2"), (None, "http://127.0.0.1:8080/v1?x=1"),
                           (None, "a/b")]  # fmt: skip
    assert editor_args().attach == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--attach", ""], "'' names no model: give a folder, .gguf file, hub id or server URL"),
        (["--attach", "g="], "'g=' names no model"),
        (["--attach", "=x"], "'=x': NAME=MODEL needs a name before '='"),
        (
            ["--attach", "x", "--prompt", "Hi"],
            "--attach adds models to the editor: it cannot be given with --prompt",
        ),  # fmt: skip
        (
            ["--attach", "x", "generate", "-s", "s", "--prompt", "Hi"],
            "cannot be given with generate",
        ),
    ],
)
def test_bad_values_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_new_session_starts_with_the_models_attached(
    tiny_llama_dir, tiny_gpt2_dir, terminal, capsys
):
    args = editor_args("--model", tiny_llama_dir, "--device", "cpu", "-s", "pair",
                       "--attach", f"g={tiny_gpt2_dir}")  # fmt: skip
    loom, name = cli_run.open_session(args)
    main = loom.active_model
    try:
        assert name == "pair" and list(loom.models) == [main, "g"]
        assert loom.models["g"].name.startswith("tiny-gpt2")
        assert f"loomterm: attached g ({tiny_gpt2_dir})" in capsys.readouterr().err
        [kid] = loom.generate(loom.append(loom.root, "Hi"), 2, model="g", temperature=0.0)
        assert kid.meta["model"] == "g"
        loom.use("g")
    finally:
        close_session(loom)
    data = load_session(sessions_dir() / "pair.loom")
    assert data.model_state == {"active": "g", "attached": [main, "g"]}

    # Opened again with the same --attach: the session brought it back already.
    loom, _ = cli_run.open_session(editor_args(*args_of(tiny_llama_dir, tiny_gpt2_dir)))
    try:
        assert list(loom.models) == [main, "g"] and loom.active_model == "g"
        err = capsys.readouterr().err
        assert f"loomterm: {tiny_gpt2_dir} is attached already, as g" in err
    finally:
        close_session(loom)


def args_of(llama, gpt2):
    return ["--model", llama, "--device", "cpu", "-s", "pair", "--attach", str(gpt2)]


def test_a_model_that_cannot_join_is_one_line_and_writes_nothing(
    tiny_llama_dir, tmp_path, terminal, capsys
):
    other = build_tiny_llama(tmp_path / "other", seed=2)
    build_tokenizer(320).save_pretrained(other)  # another vocabulary
    for source, message in (
        (tmp_path / "missing-model", "no such model"),
        (other, "cannot join this tree"),
    ):
        argv = ["--model", tiny_llama_dir, "--device", "cpu", "-s", "never", "--attach", source]
        assert cli.main([str(a) for a in argv]) == 1
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("loomterm:")]
        assert len(lines) == 1 and message in lines[0] and "Traceback" not in err
        assert not (sessions_dir() / "never.loom").exists()


def test_a_bad_attach_on_an_existing_session_leaves_it_closed_and_unchanged(
    tiny_llama_dir, tmp_path, terminal, capsys
):
    loom, _ = cli_run.open_session(editor_args("--model", tiny_llama_dir, "-s", "tale"))
    loom.append(loom.root, "kept")
    close_session(loom)
    argv = ["--model", tiny_llama_dir, "-s", "tale", "--attach", tmp_path / "missing-model"]
    assert cli.main([str(a) for a in argv]) == 1
    assert "no such model" in capsys.readouterr().err
    loom, _ = cli_run.open_session(editor_args("--model", tiny_llama_dir, "-s", "tale"))
    try:  # not left locked, and as it was
        assert [loom.text(n) for n in loom.root.children] == ["kept"]
        assert len(loom.model_table) == 1
    finally:
        close_session(loom)
