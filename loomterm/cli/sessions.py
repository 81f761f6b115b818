"""``loomterm export``, ``import`` and ``sessions``.

Export and the listing read session files directly and never load a model; import
loads one only when the text must be tokenized.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING

from loomterm.sanitize import for_stream, safe_line, say

if TYPE_CHECKING:
    from loomterm.cli.arguments import Subcommands


def register(sub: Subcommands, engine: argparse.ArgumentParser) -> None:
    """Add the session subcommands (``engine``: the engine options' parent parser, for
    ``import``; ``export`` and ``sessions`` load no model and take none)."""
    export = sub.add_parser(
        "export",
        help="write a session as Markdown, text, JSON or HTML",
        description="Write a session as Markdown (who wrote what), plain text, a JSON "
        "tree (lossless; loomterm import reads it back) or one self-contained HTML page.",
    )
    export.add_argument("session", metavar="SESSION", help="session name or .loom file")
    export.add_argument(
        "--format",
        choices=["md", "txt", "json", "html", "jsonl"],
        help="output format; jsonl: ratings as preference pairs (default: from -o's suffix, else md)",
    )
    export.add_argument(
        "--branch",
        choices=["current", "all"],
        help="the current path, or every branch (default: current for md/txt, all for json/html)",
    )
    export.add_argument(
        "-o", "--output", metavar="FILE", help="write here; - is standard output (the default)"
    )
    export.add_argument(
        "--force", action="store_true", help="replace FILE if it exists (never a session)"
    )
    export.add_argument(
        "--attribution",
        action="store_true",
        help="md: label who wrote each part (default: the text as prose)",
    )
    export.set_defaults(handler=run_export, loads_model=False)

    imp = sub.add_parser(
        "import",
        help="make a session from another loom's or tool's file (found by its content)",
        description="Make a session from a loomterm JSON tree (kept exactly, no model "
        "needed), or from a file of socketteer/loom, KoboldAI / KoboldAI Lite / koboldcpp, "
        "SillyTavern, text-generation-webui, mikupad, loomsidian or exoloom (its text is "
        "tokenized with --model; alternatives become siblings, memory, author's note and "
        "world info come along, API keys are dropped).",
        parents=[engine],
    )
    imp.add_argument(
        "file", metavar="FILE", help="the file to import (its format is found from its content)"
    )
    imp.add_argument("--name", help="the new session's name (default: the file's name)")
    imp.set_defaults(handler=run_import, loads_model=True)

    listing = sub.add_parser("sessions", help="list saved sessions")
    listing.set_defaults(handler=run_sessions, loads_model=False)


def run_export(args: argparse.Namespace) -> int:
    from loomterm import export
    from loomterm.sessions.session import load_session

    output = None if args.output == "-" else args.output
    if output:  # refused before the session is even read
        _check_output(output, args.force)
    data = load_session(args.session)
    fmt = export.format_for(output, args.format)
    text = export.render(data, fmt, args.branch, attribution=args.attribution)
    if output:
        try:
            export.write_export(output, text, force=args.force)
        except export.TargetExists as exc:  # appeared while the session was read
            raise export.ExportError(f"{exc}; --force replaces it") from None
    else:
        sys.stdout.write(for_stream(text, sys.stdout))  # a pipe or a file gets it exactly
        sys.stdout.flush()
    return 0


def _check_output(output: str, force: bool) -> None:
    from loomterm import export

    try:
        export.check_target(output, force)
    except export.TargetExists as exc:
        raise export.ExportError(f"{exc}; --force replaces it") from None


def run_import(args: argparse.Namespace) -> int:
    import warnings
    from pathlib import Path

    from loomterm import export
    from loomterm.config.settings import EngineOptions
    from loomterm.sessions.session import import_session, session_path

    options = EngineOptions.from_args(args)
    unused = [f"--{k.replace('_', '-')}" for k, v in options.loom_kwargs().items() if v is not None]
    if unused:  # the model only tokenizes here: no engine is built
        warnings.warn(f"import builds no engine: {', '.join(unused)} has no effect", stacklevel=1)
    source = export.read_import(args.file)
    for notice in getattr(source, "notices", []):
        say(f"loomterm: {notice}", sys.stderr)
    name = args.name or Path(args.file).stem
    target = session_path(name)
    data = import_session(source, target, **options.model_kwargs())
    tokens = sum(len(node.tokens) for node in data.tree.nodes.values())
    tool = getattr(source, "tool", "")
    say(
        f"imported {len(data.tree.nodes) - 1} nodes ({tokens} tokens)"
        + (f" from a {tool} file" if tool else "")
        + f" into session {target.name.removesuffix('.loom')!r} at {target}",
        sys.stdout,
    )
    return 0


def run_sessions(args: argparse.Namespace) -> int:
    from loomterm.config.locations import sessions_dir
    from loomterm.sessions.session import list_sessions

    summaries = list_sessions()
    if not summaries:
        say(f"no sessions yet in {sessions_dir()}", sys.stdout)
        return 0
    rows = [("NAME", "MODEL", "LAST CHANGE", "NODES", "PATH")]
    for s in summaries:
        when = datetime.fromtimestamp(s.modified).strftime("%Y-%m-%d %H:%M") if s.modified else "?"
        if s.error:
            row = (s.name, "(unreadable)", when, "-", s.error)
        else:
            row = (s.name, s.model, when, str(s.nodes - 1), f"{s.path_tokens} tokens")
        rows.append(tuple(safe_line(cell) for cell in row))  # names and models from files
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True))
            + "  "
            + row[4]
        )
    return 0
