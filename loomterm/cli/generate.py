"""``loomterm generate``: continue a session from the command line, no editor.

It opens (or creates) a session, optionally appends a prompt at the cursor, streams a
continuation to standard output, records every token in the session file as it
arrives, and moves the cursor to the new text. Ctrl+C stops generating and keeps what
came. Useful for scripts, and for testing that a killed process loses nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loomterm.sanitize import for_stream, say

if TYPE_CHECKING:
    from loomterm.cli.arguments import Subcommands


def overridable() -> list[str]:
    """The session settings one run of ``generate`` may change (not saving them): every
    sampling knob, and ``max_new_tokens``."""
    from loomterm.config.settings import Settings

    return [n for n, spec in Settings.SPECS.items() if spec.sampling or n == "max_new_tokens"]


def session_parser(
    sub: Subcommands, engine: argparse.ArgumentParser, command: str, text: str
) -> argparse.ArgumentParser:
    """A subcommand ``command`` (``text``: its help) that works on a session from its
    cursor (``generate``, ``weave``): ``-s`` and ``--prompt``. ``engine``: the engine
    options' parent parser."""
    parser = sub.add_parser(command, help=text, parents=[engine])
    parser.add_argument("-s", "--session", required=True, help="session name or path")
    parser.add_argument("--prompt", help="text to append at the cursor first")
    return parser


def add_sampling(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """The sampling settings one run may change (:func:`overridable`, but ``skip``)."""
    from loomterm.cli.arguments import argument_type
    from loomterm.config.settings import Settings

    group = parser.add_argument_group(
        "sampling (default: the session's settings; not saved with it)"
    )
    for name in overridable():
        if name in skip:
            continue
        group.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=argument_type(Settings.spec(name)),
            default=argparse.SUPPRESS,
            help=Settings.spec(name).help,
        )


def register(sub: Subcommands, engine: argparse.ArgumentParser) -> None:
    """Add the ``generate`` subcommand (``engine``: the engine options' parent parser)."""
    text = "continue a session from its cursor, printing the new text"
    parser = session_parser(sub, engine, "generate", text)
    add_sampling(parser)
    parser.add_argument("--seed", type=int, default=None)
    parser.set_defaults(handler=run, loads_model=True)


def open_or_create(args: argparse.Namespace):
    """The Loom of session ``args.session``: opened, or made and saved with the
    editor's starting samplers (llama.cpp's, or the model's generation_config, not the
    neutral raw distribution). Shared by ``generate`` and ``weave``."""
    from loomterm.progress import end_progress_line, print_progress
    from loomterm.sessions.opening import check_server, import_engine

    check_server(getattr(args, "model", None))  # absent: the session's recorded model
    try:
        import_engine(print_progress)  # torch: the first stage on stderr, not a silence
    finally:
        end_progress_line()
    from loomterm.config.settings import EngineOptions
    from loomterm.engine import Loom
    from loomterm.sessions.defaults import start_new_session
    from loomterm.sessions.session import open_loom, save_loom, session_path

    options = EngineOptions.from_args(args)
    path = session_path(args.session)
    if path.exists():
        loom = open_loom(path, **options.load_kwargs(), progress=print_progress)
    else:
        loom = Loom.load(**options.load_kwargs(), progress=print_progress)
        start_new_session(loom)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_loom(loom, path)
        end_progress_line()
        # A typo in -s would otherwise start a story silently beside the intended one.
        say(f"loomterm: new session {path.stem!r} ({path})")
    end_progress_line()
    # Which backend runs it (auto chose): llama.cpp or torch, and the threads.
    print(f"loomterm: {loom.runner.name} on {loom.runner.where}", file=sys.stderr)
    return loom


@dataclass
class SessionRun:
    """One command-line run on a session (``session_run``): the loom, the node to
    continue from, this run's settings and the Ctrl+C event."""

    loom: Any
    node: Any
    settings: Any
    cancel: threading.Event


@contextlib.contextmanager
def session_run(args: argparse.Namespace, echo_prompt: bool = False) -> Iterator[SessionRun]:
    """Open or make ``args.session``, append ``args.prompt`` at the cursor (echoed to
    standard output with ``echo_prompt``), refuse an empty document, and take the
    session's settings with what the command line gives (not saved). Ctrl+C sets the
    run's ``cancel`` meanwhile; on the way out the session is closed. Shared by
    ``generate`` and ``weave``."""
    from loomterm.errors import InputError
    from loomterm.sessions.session import close_session

    loom = open_or_create(args)
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        node = loom.cursor
        if args.prompt:
            node = loom.append(node, args.prompt)
            loom.cursor = node
            if echo_prompt:
                sys.stdout.write(for_stream(args.prompt, sys.stdout))
        if node.end == 0:
            raise InputError("the session is empty: give a --prompt to start from")
        settings = loom.settings.replace(
            **{name: getattr(args, name) for name in overridable() if hasattr(args, name)}
        )
        yield SessionRun(loom, node, settings, cancel)
    finally:
        signal.signal(signal.SIGINT, previous)
        close_session(loom)


def run(args: argparse.Namespace) -> int:
    with session_run(args, echo_prompt=True) as session:
        loom, settings = session.loom, session.settings

        def show(_node, _token, piece: str) -> None:
            sys.stdout.write(for_stream(piece, sys.stdout))  # a pipe gets the text as is
            sys.stdout.flush()

        from loomterm.engine.text_prefix import AfterTyped

        kids = loom.generate(
            session.node,
            settings.max_new_tokens,
            seed=args.seed,
            on_token=AfterTyped(show),  # a healed word's typed part is printed already
            cancel=session.cancel,
            **settings.sampling(),
        )
        if kids:
            loom.cursor = kids[0]
        sys.stdout.write("\n")
    return 0
