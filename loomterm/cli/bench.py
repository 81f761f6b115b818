"""``loomterm bench``: speed and quality figures, each a ratio against a same-run baseline."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from loomterm.sanitize import safe_text, say

if TYPE_CHECKING:
    from loomterm.cli.arguments import Subcommands


def register(sub: Subcommands, engine: argparse.ArgumentParser) -> None:
    """Add the ``bench`` subcommand (``engine``: the engine options' parent parser)."""
    parser = sub.add_parser(
        "bench", help="measure edit latency, decode speed and re-rope quality", parents=[engine]
    )
    parser.add_argument("--quick", action="store_true", help="a short run for CI smoke use")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--sections",
        metavar="NAMES",
        default=None,
        help="only these sections, comma-separated (e.g. drafted,decode; default: all)",
    )
    parser.set_defaults(handler=run, loads_model=True)


def run(args: argparse.Namespace) -> int:
    """Load the model, run the plan, print the table (and write the JSON)."""
    from loomterm.bench.report import format_table, write_json
    from loomterm.bench.runner import NOTES, SERVER_NOTES, BenchPlan, run_bench, run_server_bench
    from loomterm.config.settings import EngineOptions
    from loomterm.engine.models.load import end_progress_line, print_progress
    from loomterm.engine.open import RunnerOptions, load
    from loomterm.engine.remote import is_server_url
    from loomterm.engine.threads import use_threads

    def log(text: str) -> None:
        say(f"bench: {text}")

    options = EngineOptions.from_args(args)
    sections = _sections(args.sections, BenchPlan.sections) if args.sections else None
    if is_server_url(options.model):  # the rows that apply to a server
        result = run_server_bench(options.model, args.quick, log, **options.server_kwargs())
        print(safe_text(format_table(result.rows, result.title(), SERVER_NOTES)))
        if args.json:
            write_json(args.json, result.rows, result.meta)
        return 0
    # The bench measures the torch runner (its llamacpp section runs the same model's
    # GGUF file on llama.cpp beside it); the model comes by the one road (engine.open).
    opening = RunnerOptions.of(**options.load_kwargs()).but(backend="torch")
    loaded = load(options.model, opening, print_progress)
    end_progress_line()
    if options.threads is None and args.quick and loaded.device.type == "cpu":
        # Two threads on a two-core machine that is busy elsewhere can run 3-5x slower
        # than one (threads wait on each other); a smoke run wants steady figures.
        use_threads("torch", 1)
    plan = BenchPlan.quick() if args.quick else BenchPlan.full(loaded.device)
    if sections:
        plan = plan.scaled(sections=sections)
    result = run_bench(loaded, plan, quick=args.quick, log=log, **options.loom_kwargs())
    print(safe_text(format_table(result.rows, result.title(), NOTES)))
    if args.json:
        write_json(args.json, result.rows, result.meta)
    return 0


def _sections(given: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """``--sections a,b`` as a tuple, checked before the model loads (a typo costs no
    wait): an unknown name is a one-line error naming the sections there are."""
    from loomterm.errors import InputError

    sections = tuple(name.strip() for name in given.split(",") if name.strip())
    unknown = sorted(set(sections) - set(known))
    if unknown or not sections:
        raise InputError(
            f"bench has no section {', '.join(unknown) or '(none given)'}; "
            f"the sections are {', '.join(known)}"
        )
    return sections
