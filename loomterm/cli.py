"""The ``loomterm`` command line.

This module stays light: it imports neither torch nor textual at module level, so
``loomterm --help`` and argument errors answer at once. Each subcommand lives in its own
module and is imported only when chosen.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from loomterm.errors import LoomError


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, subcommands included."""
    parser = argparse.ArgumentParser(
        prog="loomterm",
        description="A terminal loom: write, branch and edit language-model output.",
    )
    add_model_args(parser)
    parser.add_argument("-s", "--session", help="session name or path to open or create")
    parser.add_argument(
        "--read-only", action="store_true", help="open the session without writing to it"
    )
    parser.add_argument(
        "--retokenize",
        action="store_true",
        help="re-tokenize a session made with another model (keeps a .bak copy)",
    )
    parser.add_argument(
        "--prompt",
        help="print a greedy completion of PROMPT and exit, instead of opening the editor",
    )
    parser.add_argument("--max-new-tokens", type=int, default=48, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from loomterm import cli_bench, cli_generate, cli_sessions

    cli_generate.register(sub)
    cli_bench.register(sub)
    cli_sessions.register(sub)
    return parser


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that loads a model."""
    parser.add_argument(
        "--model",
        help="local HF folder, .gguf file, hub id, or a server's URL such as "
        "http://127.0.0.1:8080 (default: SmolLM2-135M-Instruct)",
    )
    parser.add_argument(
        "--server-kind",
        choices=("llama-server", "vllm", "sglang", "openai"),
        help="with --model URL: the kind of server (default: detected); "
        "an API key comes from LOOMTERM_API_KEY or OPENAI_API_KEY",
    )
    parser.add_argument(
        "--server-model", help="with --model URL: the model on a multi-model server"
    )
    parser.add_argument("--device", default="auto", help="auto, cuda, mps or cpu")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    parser.add_argument("--n-ctx", type=int, default=None, help="context window in tokens")
    parser.add_argument(
        "--kv-budget",
        default=None,
        help="cap on cached KV memory, e.g. 2G (default: half the free memory)",
    )


def server_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``--server-*`` options that were given, for ``Loom.load`` / ``Session.open``."""
    names = ("server_kind", "server_model")
    return {name: getattr(args, name) for name in names if getattr(args, name, None)}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``loomterm`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # Warnings (a session that stopped saving, a stale KV snapshot) are one line each.
    warnings.formatwarning = lambda message, *rest, **kw: f"loomterm: warning: {message}\n"
    try:
        if getattr(args, "handler", None) is not None:
            return int(args.handler(args) or 0)
        from loomterm import cli_run

        return int(cli_run.run(args) or 0)
    except LoomError as exc:
        _end_progress()
        print(f"loomterm: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a read-only folder, a full disk: the user's environment
        _end_progress()
        where = f": {exc.filename}" if exc.filename else ""
        print(f"loomterm: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("loomterm: interrupted", file=sys.stderr)
        return 130


def _end_progress() -> None:
    """Finish a half-drawn progress line before an error is printed."""
    progress = sys.modules.get("loomterm.progress")
    if progress is not None:
        progress.end_progress_line()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
