"""The ``loomterm`` command line.

This module stays light: it imports neither torch nor textual at module level, so
``loomterm --help`` and argument errors answer at once. Each subcommand lives in its own
module and is imported only when chosen.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings

from loomterm.cli.arguments import argument_type
from loomterm.config.settings import EngineOptions
from loomterm.errors import LoomError
from loomterm.sanitize import safe_line, say


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, subcommands included."""
    engine = engine_options()
    parser = argparse.ArgumentParser(
        prog="loomterm",
        description="A terminal loom: write, branch and edit language-model output.",
        parents=[engine],
    )
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
    parser.add_argument(
        "--attach",
        action="append",
        default=[],
        type=attach_value,
        metavar="[NAME=]MODEL",
        help="also attach MODEL to the session in the editor (as --model takes it: a "
        "folder, .gguf file, hub id or server URL; NAME= gives its key); repeatable",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from loomterm.cli import bench as cli_bench
    from loomterm.cli import build as cli_build
    from loomterm.cli import generate as cli_generate
    from loomterm.cli import sessions as cli_sessions
    from loomterm.cli import weave as cli_weave

    cli_generate.register(sub, engine)
    cli_weave.register(sub, engine)
    cli_bench.register(sub, engine)
    cli_sessions.register(sub, engine)
    cli_build.register(sub)
    return parser


def engine_options() -> argparse.ArgumentParser:
    """The options of every command that loads a model (``EngineOptions``), as a parent
    parser for the top-level command and each such subcommand.

    None has a default here (``argparse.SUPPRESS``): an option given before the
    subcommand's name is kept unless given again after it, and
    ``EngineOptions.from_args`` fills in the defaults, which live in ``EngineOptions``.
    """
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("engine options")
    for name, spec in EngineOptions.SPECS.items():
        group.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=argument_type(spec),
            default=argparse.SUPPRESS,
            help=spec.help,
        )
    return parent


# A key given as NAME=MODEL: what ``engine.loom.registry.slug`` keeps, with no ':' or '/', so
# that a URL or a path holding '=' is never read as a name.
_ATTACH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,39}")


def attach_value(text: str) -> tuple[str | None, str]:
    """``--attach [NAME=]MODEL`` read as ``(name or None, model)``."""
    head, sep, tail = text.partition("=")
    if sep and _ATTACH_NAME.fullmatch(head.strip()):
        name, model = head.strip(), tail.strip()
    elif sep and not head.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: NAME=MODEL needs a name before '='")
    else:
        name, model = None, text.strip()
    if not model:
        raise argparse.ArgumentTypeError(
            f"{text!r} names no model: give a folder, .gguf file, hub id or server URL"
        )
    return name, model


def given_engine_options(args: argparse.Namespace) -> list[str]:
    """The engine options on the command line, as flags."""
    return ["--" + name.replace("_", "-") for name in EngineOptions.SPECS if hasattr(args, name)]


def check_models(args: argparse.Namespace) -> None:
    """Refuse a ``--model`` or ``--attach`` value that names no model here (a missing
    path, a file that is not a .gguf) with one line, before anything heavy loads."""
    from loomterm.engine.models.hub import check_hub_id
    from loomterm.engine.models.source import classify
    from loomterm.engine.remote import is_server_url

    models = [getattr(args, "model", None)]
    models += [source for _name, source in getattr(args, "attach", [])]
    for model in models:
        if model is not None and not is_server_url(model):
            source = classify(model)
            if source.hub_id is not None:  # not cached and no hub: one line, at once
                check_hub_id(source.hub_id)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``loomterm`` console script."""
    from loomterm.engine.threads import passive_wait

    passive_wait()  # before torch starts OpenMP: idle threads sleep, not spin
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "loads_model", True):  # sessions, export: before the name too
        given = given_engine_options(args)
        if given:
            parser.error(f"{args.command} loads no model: {', '.join(given)} cannot be given")
    if args.attach and (args.command is not None or args.prompt is not None):
        used = args.command or "--prompt"
        parser.error(f"--attach adds models to the editor: it cannot be given with {used}")
    # Warnings (a session that stopped saving, a stale KV snapshot) are one line each.
    warnings.formatwarning = lambda message, *rest, **kw: (
        safe_line(f"loomterm: warning: {message}") + "\n"
    )
    try:
        if getattr(args, "loads_model", True):
            check_models(args)  # a path typo answers now, before torch is imported
        if getattr(args, "handler", None) is not None:
            return int(args.handler(args) or 0)
        from loomterm.cli import run as cli_run

        return int(cli_run.run(args) or 0)
    except LoomError as exc:
        _end_progress()
        say(f"loomterm: {exc}")
        return 1
    except OSError as exc:  # a read-only folder, a full disk: the user's environment
        _end_progress()
        where = f": {exc.filename}" if exc.filename else ""
        say(f"loomterm: {exc.strerror or exc}{where}")
        return 1
    except KeyboardInterrupt:
        say("loomterm: interrupted")
        return 130


def _end_progress() -> None:
    """Finish a half-drawn progress line before an error is printed."""
    progress = sys.modules.get("loomterm.progress")
    if progress is not None:
        progress.end_progress_line()
