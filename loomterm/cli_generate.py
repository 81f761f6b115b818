"""``loomterm generate``: continue a session from the command line, no editor.

It opens (or creates) a session, optionally appends a prompt at the cursor, streams a
continuation to standard output, records every token in the session file as it
arrives, and moves the cursor to the new text. Ctrl+C stops generating and keeps what
came. Useful for scripts, and for testing that a killed process loses nothing.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``generate`` subcommand."""
    from loomterm.cli import add_model_args

    parser = sub.add_parser(
        "generate", help="continue a session from its cursor, printing the new text"
    )
    parser.add_argument("-s", "--session", required=True, help="session name or path")
    add_model_args(parser)
    parser.add_argument("--prompt", help="text to append at the cursor first")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.set_defaults(handler=run)


# C0/C1 control characters other than newline and tab: never sent raw to a terminal,
# where an escape sequence from the model could move the cursor or retitle the window.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with control characters shown as ``\\xNN`` escapes."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def run(args: argparse.Namespace) -> int:
    from loomterm.cli import server_options
    from loomterm.engine import Loom
    from loomterm.engine.models import end_progress_line, print_progress
    from loomterm.errors import InputError
    from loomterm.session import close_session, open_loom, save_loom, session_path

    path = session_path(args.session)
    common = dict(device=args.device, dtype=args.dtype, n_ctx=args.n_ctx, progress=print_progress)
    common.update(server_options(args))
    if path.exists():
        loom = open_loom(path, model=args.model, **common)
    else:
        loom = Loom.load(args.model, kv_budget=args.kv_budget, **common)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_loom(loom, path)
    end_progress_line()
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        node = loom.cursor
        if args.prompt:
            node = loom.append(node, args.prompt)
            loom.cursor = node
            sys.stdout.write(args.prompt if not sys.stdout.isatty() else visible(args.prompt))
        if node.end == 0:
            raise InputError("the session is empty: give a --prompt to start from")
        overrides = {} if args.temperature is None else {"temperature": args.temperature}

        raw = not sys.stdout.isatty()  # pipes get the text as is

        def show(_node, _token, piece: str) -> None:
            sys.stdout.write(piece if raw else visible(piece))
            sys.stdout.flush()

        kids = loom.generate(
            node,
            args.max_new_tokens,
            seed=args.seed,
            on_token=show,
            cancel=cancel,
            **overrides,
        )
        if kids:
            loom.cursor = kids[0]
        sys.stdout.write("\n")
    finally:
        signal.signal(signal.SIGINT, previous)
        close_session(loom)
    return 0
