"""docs/architecture.md cannot drift from the code: every path it names exists, every
import-linter contract it cites is in pyproject.toml (and every contract is cited), and
every package under ``loomterm/`` is named in it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "loomterm"

# Folders a path in the page may start from: the repository's own, or loomterm's packages
# named without the leading ``loomterm/`` (``engine/kv/cache.py``, ``tui/app.py``).
TOPS = ("loomterm", *sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()))
PATH = re.compile(rf"`((?:{'|'.join(TOPS)})/[\w./]*)`")
CONTRACT = re.compile(r'^- "(.+)"$', flags=re.M)


def named_paths(text: str) -> list[str]:
    """Every path in backticks that starts at ``loomterm/`` or at one of its packages."""
    return PATH.findall(text)


def resolve(path: str) -> Path:
    """Where a named path lies: from the repository root, else from ``loomterm/``."""
    return ROOT / path if path.startswith("loomterm/") else PACKAGE / path


def missing_paths(text: str) -> list[str]:
    return [path for path in named_paths(text) if not resolve(path).exists()]


def cited_contracts(text: str) -> list[str]:
    return CONTRACT.findall(text)


def contract_names() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["name"] for c in config["tool"]["importlinter"]["contracts"]}


def packages() -> list[Path]:
    """Every package under ``loomterm/`` (a folder with an ``__init__.py``), itself aside."""
    return sorted(init.parent for init in PACKAGE.rglob("__init__.py") if init.parent != PACKAGE)


def unnamed_packages(text: str) -> list[str]:
    named = {resolve(path.rstrip("/")) for path in named_paths(text)}
    named |= {p.parent for p in named if p.name == "__init__.py"}
    return [str(p.relative_to(ROOT)) for p in packages() if p not in named]


def test_every_path_the_page_names_exists():
    text = DOC.read_text()
    assert len(named_paths(text)) > 50  # the pattern still finds the page's paths
    assert missing_paths(text) == []


def test_a_made_up_path_is_caught():
    assert missing_paths("`loomterm/sessions/no_such_module.py`, `engine/kv/nowhere.py`") == [
        "loomterm/sessions/no_such_module.py",
        "engine/kv/nowhere.py",
    ]
    assert missing_paths("`loomterm/sessions/session.py`, `engine/kv/cache.py`") == []


def test_every_contract_cited_exists_and_every_contract_is_cited():
    cited = cited_contracts(DOC.read_text())
    assert cited, "the page lists no contract"
    assert sorted(set(cited) - contract_names()) == []
    assert sorted(contract_names() - set(cited)) == []


def test_a_made_up_contract_is_caught():
    cited = cited_contracts('- "Layers: the command line over nothing at all"\n')
    assert set(cited) - contract_names() == {"Layers: the command line over nothing at all"}


def test_every_package_is_named():
    assert unnamed_packages(DOC.read_text()) == []


def test_an_unnamed_package_is_caught():
    text = DOC.read_text().replace("`loomterm/search/`", "search")
    text = re.sub(r"`loomterm/search/[\w.]*`", "", text)
    assert unnamed_packages(text) == ["loomterm/search"]
