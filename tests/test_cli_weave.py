"""``loomterm weave``: a weave from the command line, recorded in the session file."""

from __future__ import annotations

import pytest

from loomterm import cli
from loomterm.sessions.session import load_session


def run(argv: list) -> int:
    return cli.main([str(a) for a in argv])


def weave_args(model, name: str, *more) -> list:
    return ["weave", "-s", name, "--model", model, "--device", "cpu", *more]


def test_weave_records_the_subtree_and_prints_the_best_branch(tiny_llama_dir, capsys):
    outs = []
    for name in ("one", "two"):
        argv = weave_args(tiny_llama_dir, name, "--prompt", "Once upon a time", "-n", 3)
        assert run([*argv, "--depth", 2, "--keep", 1, "--tokens", 4, "--seed", 5]) == 0
        captured = capsys.readouterr()
        outs.append(captured.out)
        assert "weave: level 1/2 \u00b7 0/3 nodes" in captured.err
        assert "weave: level 2/2 \u00b7 3/3 nodes" in captured.err
        assert "weave: done: 6 nodes, made per level [3, 3], kept [1, 1]" in captured.err
        data = load_session(name)
        woven = [n for n in data.tree.nodes.values() if "weave" in n.meta]
        assert len(woven) == 6 and all(1 <= len(n.tokens) <= 4 for n in woven)
        best = data.cursor_node
        assert best in woven and best.parent in woven  # the best of the last level
        text = "".join("".join(data.pieces[n.id]) for n in (best.parent, best))
        assert captured.out == text + "\n"
    assert outs[0] == outs[1]  # the same seed, the same tree


def test_a_bad_weave_is_one_line_and_changes_nothing(tiny_llama_dir, capsys):
    assert run(weave_args(tiny_llama_dir, "tale", "--prompt", "Hi", "--tokens", 2)) == 0
    count = len(load_session("tale").tree.nodes)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:  # refused before the model loads
        run(weave_args(tiny_llama_dir, "tale", "-n", 0))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].endswith("argument -n/--n: must be a whole number from 1 to 64")
    assert "load" not in err
    # The engine's own check, for what the command line cannot see: an empty session.
    assert run(weave_args(tiny_llama_dir, "empty")) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "loomterm: the session is empty: give a --prompt to start from"
    )
    assert len(load_session("tale").tree.nodes) == count
