"""``loomterm export``, ``import`` and ``sessions``.

Export and the listing read session files directly and never load a model; import
loads one only when the text must be tokenized.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from loomterm.sanitize import for_stream, safe_line, say


def register(sub: argparse._SubParsersAction, engine: argparse.ArgumentParser) -> None:
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
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default, or -: stdout)")
    export.set_defaults(handler=run_export, loads_model=False)

    imp = sub.add_parser(
        "import",
        help="make a session from a loomterm JSON tree or a socketteer/loom tree",
        description="Make a session from a loomterm JSON tree (kept exactly, no model "
        "needed) or a socketteer/loom JSON tree (its text is tokenized with --model).",
        parents=[engine],
    )
    imp.add_argument("file", metavar="FILE", help="the JSON file to import")
    imp.add_argument("--name", help="the new session's name (default: the file's name)")
    imp.set_defaults(handler=run_import, loads_model=True)

    listing = sub.add_parser("sessions", help="list saved sessions")
    listing.set_defaults(handler=run_sessions, loads_model=False)


def run_export(args: argparse.Namespace) -> int:
    from loomterm import export
    from loomterm.session import load_session

    data = load_session(args.session)
    output = None if args.output == "-" else args.output
    fmt = export.format_for(output, args.format)
    text = export.render(data, fmt, args.branch)
    if output:
        export.write_atomic(output, text)
    else:
        sys.stdout.write(for_stream(text, sys.stdout))  # a pipe or a file gets it exactly
        sys.stdout.flush()
    return 0


def run_import(args: argparse.Namespace) -> int:
    import warnings
    from pathlib import Path

    from loomterm import export
    from loomterm.session import import_session, session_path
    from loomterm.settings import EngineOptions

    options = EngineOptions.from_args(args)
    unused = [f"--{k.replace('_', '-')}" for k, v in options.loom_kwargs().items() if v is not None]
    if unused:  # the model only tokenizes here: no engine is built
        warnings.warn(f"import builds no engine: {', '.join(unused)} has no effect", stacklevel=1)
    source = export.read_import(args.file)
    name = args.name or Path(args.file).stem
    target = session_path(name)
    data = import_session(source, target, **options.model_kwargs())
    tokens = sum(len(node.tokens) for node in data.tree.nodes.values())
    say(
        f"imported {len(data.tree.nodes) - 1} nodes ({tokens} tokens) into session "
        f"{target.name.removesuffix('.loom')!r} at {target}",
        sys.stdout,
    )
    return 0


def run_sessions(args: argparse.Namespace) -> int:
    from loomterm.locations import sessions_dir
    from loomterm.session import list_sessions

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
