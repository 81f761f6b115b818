"""``loomterm export``, ``import`` and ``sessions``."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the session subcommands (filled in by the sessions work)."""
