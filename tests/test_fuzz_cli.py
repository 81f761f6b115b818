"""Every option of every ``loomterm`` command, given hostile values, ends in success or
one line and a non-zero exit; never a traceback.

Values go through ``loomterm.cli.main`` in this process. Commands that load a model are
given a model path that does not exist, after the fuzzed option, so a value that parses
ends in that one line before anything heavy loads; the values a model option itself
takes are tried in a short fixed list (a hub id would otherwise reach for the network).
"""

from __future__ import annotations

import argparse
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomterm.cli import build_parser
from tests.fuzzing import FINGERPRINT, NUMBERS, assert_clean_end, budget, run_cli

# What a shell can hand a program: no NUL, but surrogate escapes of bytes that are not
# UTF-8. Control characters are left to the one sanitiser, which owns how outside text
# reaches the terminal (a message echoing them is its business, not the parser's).
ARG_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")) | st.just("\udcff"),
    max_size=30,
)
VALUES = (
    ARG_TEXT
    | NUMBERS.map(str)
    | st.sampled_from(
        [
            "",
            "-1",
            "1e999",
            "nan",
            "inf",
            "-inf",
            "0x10",
            "1_000",
            "9" * 400,
            "true",
            "{",
            "[1]",
            "--",
        ]
    )
)
FREE_TEXT = {"--model", "--attach", "--session", "--prompt", "--name", "--output", "--json"}


def _commands() -> list[tuple[str | None, str]]:
    parser = build_parser()
    subs: dict[str | None, argparse.ArgumentParser] = {None: parser}
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its parsers there
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            subs.update(action.choices)
    return [
        (name, action.option_strings[-1])
        for name, sub in subs.items()
        for action in sub._actions  # noqa: SLF001
        if action.option_strings
        and action.nargs != 0
        and not isinstance(action, argparse._HelpAction)  # noqa: SLF001
        and action.option_strings[-1] not in FREE_TEXT
    ]


COMMANDS = _commands()


def argv_for(command: str | None, option: str, value: str, tmp_path) -> list[str]:
    missing = str(tmp_path / "no-such-model")
    if command == "export":
        return ["export", "no-such-session", option, value]
    if command == "import":
        return ["import", str(tmp_path / "no-such.json"), option, value, "--model", missing]
    head = [] if command is None else [command]
    return [*head, f"{option}={value}", "--model", missing]


def test_every_command_is_covered():
    assert {c for c, _ in COMMANDS} >= {None, "generate", "weave", "bench", "export", "import"}
    assert len(COMMANDS) > 60


@budget(400)
@given(case=st.sampled_from(COMMANDS), value=VALUES)
def test_hostile_option_values_end_in_one_line(tmp_path, case, value):
    command, option = case
    code, _, err = run_cli(argv_for(command, option, value, tmp_path))
    assert_clean_end(code, err, allowed=(1, 2))


HOSTILE_MODELS = [
    " ",
    "/",
    "..",
    "\udcff",
    "x" * 5000,
    "http://",
    "http://[::1",
    "http://127.0.0.1:0",
    "file:///etc/passwd",
    "model.gguf",
    "/dev/null",
    "a=b",
    "=x",
]


@pytest.mark.parametrize("model", HOSTILE_MODELS)
@pytest.mark.parametrize("command", [[], ["generate", "--prompt", "x"], ["import", "t.json"]])
def test_hostile_models_end_in_one_line(tmp_path, monkeypatch, command, model):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.gguf").write_bytes(b"GGUF" + b"\x00" * 20)  # a cut-off GGUF file
    code, _, err = run_cli([*command, "--model", model, "--attach", model][: len(command) + 2])
    assert_clean_end(code, err, allowed=(1, 2))


@pytest.fixture
def one_session(tmp_path):
    tree = {
        "format": "loomterm-tree",
        "version": 1,
        "model": {"name": "m", "fingerprint": FINGERPRINT},
        "nodes": [
            {"id": 0, "parent": None, "children": [1], "tokens": [], "pieces": []},
            {"id": 1, "parent": 0, "tokens": [5], "pieces": ["a"]},
        ],
    }
    source = tmp_path / "tree.json"
    source.write_text(json.dumps(tree))
    assert run_cli(["import", str(source), "--name", "base"])[0] == 0
    return source


PATHS = ["", " ", "/", ".", "..", "/tmp", "/dev/full", "/proc/self/mem", "x" * 300, "a/b/c"]


@pytest.mark.parametrize("path", PATHS)
def test_hostile_output_and_names_end_in_one_line(one_session, tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    for argv in (
        ["export", "base", "--format", "json", "-o", path],
        ["export", path],
        ["import", str(one_session), "--name", path],
    ):
        code, _, err = run_cli(argv)
        assert_clean_end(code, err, allowed=(0, 1))
