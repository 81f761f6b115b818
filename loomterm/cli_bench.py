"""``loomterm bench``: speed and quality figures, each a ratio against a same-run baseline."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` subcommand."""
    from loomterm.cli import add_model_args

    parser = sub.add_parser("bench", help="measure edit latency, decode speed and re-rope quality")
    add_model_args(parser)
    parser.add_argument("--quick", action="store_true", help="a short run for CI smoke use")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from loomterm.errors import LoomError

    raise LoomError("bench is not built yet")
