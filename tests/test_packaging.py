"""The wheel ships what the installed program needs beyond the Python package."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_contains_the_themes(tmp_path):
    pytest.importorskip("hatchling", reason="the test extra installs hatchling")
    # The PEP 517 hook pip itself would call, without pip's isolated build environment.
    code = "import sys; from hatchling.build import build_wheel; print(build_wheel(sys.argv[1]))"
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    wheel = tmp_path / result.stdout.strip().splitlines()[-1]
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "loomterm/themes/dark.tcss" in names
    assert "loomterm/engine/models/load.py" in names
    assert "loomterm/cli/__init__.py" in names
    assert not any(name.startswith("tests/") for name in names)
