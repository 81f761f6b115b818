"""The headless layers never pull in the UI toolkit, and the CLI starts without torch.

Each check runs in a fresh interpreter, so modules imported by other tests do not count.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

HEADLESS = [
    "loomterm.tree",
    "loomterm.tree_map",
    "loomterm.search",
    "loomterm.search.reach",
    "loomterm.errors",
    "loomterm.config.locations",
    "loomterm.progress",
    "loomterm.config.settings",
    "loomterm.config.specs",
    "loomterm.atomic",
    "loomterm.engine.models.load",
    "loomterm.engine.loom.facade",
    "loomterm.engine",
    "loomterm.store",
    "loomterm.sessions.session",
    "loomterm.sessions.recorder",
    "loomterm.sessions.kv_snapshot",
    "loomterm.export",
    "loomterm.bench",
]
UI_MODULES = ["textual", "rich"]


def imported_after(statement: str) -> set[str]:
    """The names in sys.modules after running ``statement`` in a fresh interpreter."""
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_headless_modules_do_not_import_the_ui():
    names = [name for name in HEADLESS if present(name)]
    assert "loomterm.engine.models.load" in names
    modules = imported_after("\n".join(f"import {name}" for name in names))
    for ui in UI_MODULES:
        leaked = sorted(m for m in modules if m == ui or m.startswith(ui + "."))
        assert not leaked, f"importing {names} pulled in {leaked[:5]}"


def test_cli_imports_without_torch():
    # ``loomterm --help`` and argument errors must answer at once.
    modules = imported_after("import loomterm.cli\nloomterm.cli.build_parser()")
    heavy = {"torch", "transformers", "textual"} & modules
    assert not heavy, f"the CLI parser imported {sorted(heavy)}"


def test_layer_contracts_hold():
    """import-linter's contracts in pyproject.toml: each layer imports only below it."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint)], capture_output=True, text=True, timeout=300, check=False, cwd=REPO
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_sessions_load_without_torch():
    """Listing and resolving sessions, and exporting, stay light: no torch."""
    modules = imported_after("import loomterm.sessions.session, loomterm.export, loomterm.store")
    assert "torch" not in modules
