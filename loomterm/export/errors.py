"""The exporters' error, and the one-line message for a file that cannot be imported."""

from __future__ import annotations

import os

from loomterm.errors import LoomError


class ExportError(LoomError):
    """An export or import that cannot be done (bad input file, unwritable output)."""


def import_error(path: str | os.PathLike, why: str) -> ExportError:
    return ExportError(f"cannot import {os.fspath(path)}: {why}")
