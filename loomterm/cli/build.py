"""``loomterm build-llama``: build llama.cpp once into loomterm's cache folder (the
``llama.cpp`` backend's library and binding, and llama-server), with progress lines."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomterm.cli.arguments import Subcommands


def register(sub: Subcommands) -> None:
    """Add the ``build-llama`` subcommand (it loads no model)."""
    parser = sub.add_parser(
        "build-llama",
        help="build llama.cpp here once (about 15 minutes on 2 cores): the llama.cpp "
        "backend for .gguf files, and llama-server",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="compile jobs (default: one per CPU)"
    )
    parser.set_defaults(handler=run, loads_model=False)


def run(args: argparse.Namespace) -> int:
    """Build (or find) the build; print where it is. A machine that cannot build says
    why in one line (``LoomError``, printed by the command line)."""
    from loomterm.serving.llama_build import ensure_llama_cpp

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    home = ensure_llama_cpp(log, jobs=args.jobs)
    print(home)
    log("loomterm: llama.cpp is ready: --backend auto runs .gguf files on it")
    return 0
