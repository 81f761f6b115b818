"""The README and docs/ stay true: the set-up commands CI runs, links that resolve, an
API block whose imports exist, and the first-session keys in the full key table."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of one language in a Markdown text."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def table_keys(text: str) -> set[str]:
    """Every key named in the first column of a Markdown key table."""
    keys = set()
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or not cells[1].strip() or set(cells[1].strip()) <= {"-"}:
            continue
        for part in re.split(r" / |, or |, then ", cells[1].strip()):
            keys.add(part.strip())
    return keys


def test_readme_gives_the_two_setup_commands_ci_runs():
    commands = code_blocks(README.read_text(), "sh")
    assert len(commands) == 2
    run, test = (c.strip() for c in commands)
    assert run.endswith("pip install -e . && loomterm")
    assert test.endswith("pip install -e '.[test]' && pytest")
    ci = (ROOT / ".ci/run").read_text()
    # CI runs the test command's steps: the same pinned torch, the same extra, bare pytest.
    for step in ("pip install --quiet torch==2.13.0", "pip install --quiet -e '.[test]'"):
        assert step in ci
        assert step.replace("--quiet ", "") in test
    assert re.search(r"^pytest </dev/null", ci, flags=re.M)


def test_readme_is_short_and_links_every_docs_page():
    text = README.read_text()
    assert len(text.splitlines()) < 150
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", text))
    assert linked == {f"docs/{page.name}" for page in DOCS.glob("*.md")}


def test_every_relative_link_resolves():
    for page in [README, *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_engine_api_block_parses_and_its_imports_exist():
    (block,) = code_blocks((DOCS / "engine-api.md").read_text(), "python")
    tree = ast.parse(block)
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert len(imports) >= 5
    for node in imports:
        module = importlib.import_module(node.module)
        for alias in node.names:
            assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"


def test_first_session_keys_are_in_the_full_key_table():
    readme_keys = table_keys(README.read_text()) - {"key"}
    editor_keys = table_keys((DOCS / "editor.md").read_text())
    assert {"ctrl+g", "escape", "ctrl+q", "ctrl+p", "f1"} <= readme_keys
    assert readme_keys <= editor_keys, readme_keys - editor_keys
