"""``loomterm weave``: grow a session's tree from its cursor by itself, no editor.

It opens (or creates) a session, optionally appends a prompt at the cursor, weaves
(``loomterm.engine.loom.weave``: ``n`` children per kept node, ``depth`` levels, the best
``keep`` per level by ``score``), records every node in the session file as it is made,
moves the cursor to the best branch and prints that branch's new text to standard
output; progress and a summary go to standard error. Ctrl+C stops, keeping what was
made.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomterm.cli.arguments import Subcommands


def register(sub: Subcommands, engine: argparse.ArgumentParser) -> None:
    """Add the ``weave`` subcommand (``engine``: the engine options' parent parser)."""
    from loomterm.cli.generate import add_sampling, session_parser

    text = "grow a session's tree from its cursor, keeping the best branches per level"
    parser = session_parser(sub, engine, "weave", text)
    parser.add_argument("-n", "--n", type=count(64), default=4, help="children per node (4)")
    parser.add_argument("--depth", type=count(64), default=3, help="levels below the cursor (3)")
    parser.add_argument("--keep", type=count(64), default=2, help="nodes kept per level (2)")
    parser.add_argument("--tokens", type=count(1 << 20), default=16, help="tokens per node (16)")
    parser.add_argument(
        "--score",
        choices=("logprob", "perplexity", "rating"),
        default="logprob",
        help="what 'best' means: mean log-probability, lowest perplexity, or the "
        "nodes' ratings, then log-probability (logprob)",
    )
    parser.add_argument("--seed", type=int, default=None, help="the same seed, the same tree")
    add_sampling(parser, skip=("max_new_tokens",))  # --tokens
    parser.set_defaults(handler=run, loads_model=True)


def count(top: int):
    """An argparse ``type``: a whole number from 1 to ``top`` (the engine's limits), so a
    typo is refused before the model loads."""

    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if not 1 <= value <= top:
            raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {top}")
        return value

    read.__name__ = "count"
    return read


def run(args: argparse.Namespace) -> int:
    from loomterm.cli.generate import session_run
    from loomterm.engine.loom.weave import WeaveRequest, weave
    from loomterm.sanitize import for_stream, say

    with session_run(args) as session:
        loom, node, settings = session.loom, session.node, session.settings

        def progress(level: int, done: int, total: int) -> None:
            say(f"weave: level {level}/{args.depth} \u00b7 {done}/{total} nodes")

        request = WeaveRequest(
            node,
            n=args.n,
            depth=args.depth,
            keep=args.keep,
            score=args.score,
            tokens=args.tokens,
            seed=args.seed,
            settings=settings.sampling(),
            cancel=session.cancel,
            progress=progress,
        )
        result = weave(loom, request)
        best = result.best
        if best is not None:
            loom.cursor = best
            text = loom.decode(loom.tokens(best)[node.end :])
            sys.stdout.write(for_stream(text, sys.stdout) + "\n")
        head = "stopped" if result.cancelled else "done"
        say(
            f"weave: {head}: {len(result.nodes)} nodes, made per level "
            f"{result.made_per_level}, kept {result.kept_per_level}, {result.tokens} tokens "
            f"in {result.seconds:.1f} s (run {result.run_id})"
            + ("; the cursor is on the best branch" if best is not None else "")
        )
    return 0
