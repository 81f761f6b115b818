"""Bare ``loomterm``: open the editor on a session.

- ``loomterm`` opens the most recent session, or starts a new one on the default model.
- ``loomterm -s NAME|PATH`` opens that session, or creates it if it does not exist.
- The engine options (``--model``, ``--device``, ``--dtype``, ``--n-ctx``,
  ``--kv-budget``: :class:`~loomterm.config.settings.EngineOptions`) reach every Loom built.
- A session reopened in the editor attaches again the other models it had attached and
  makes the active one active again (``Session.open(reattach=True)``); one that cannot
  come back is a one-line warning. ``--attach [NAME=]MODEL`` (repeatable) attaches more.
- ``loomterm --prompt TEXT`` prints a greedy completion and exits (no editor): a quick
  check that fetching, converting, loading and decoding work on this machine.

Model loading shows its progress on stderr before the editor takes the screen. Every
error is one line (``cli.main`` prints :class:`~loomterm.errors.LoomError`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

from loomterm.cli.attach import attach_more
from loomterm.config.settings import EngineOptions
from loomterm.errors import LoomError
from loomterm.sanitize import for_stream, say

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.sessions.opening import SessionOpening

# Tokens of a ``--prompt`` completion (a quick check, shorter than a session's default).
PROMPT_TOKENS = 48


def run(args: argparse.Namespace) -> int:
    """``loomterm`` with no subcommand."""
    if args.prompt is not None:
        return run_prompt(args)
    return run_editor(args)


# -- the editor -----------------------------------------------------------------------


def run_editor(args: argparse.Namespace) -> int:
    """Open (or create) the session and run the editor until the user quits.

    On a terminal the editor opens at once on the session file and loads the model in
    the background (:func:`plan_opening`); otherwise, or where the model decides what
    is opened (``--retokenize``, the most recent session under another ``--model``),
    the model is loaded first, with its progress on stderr. Keys typed meanwhile
    reach the editor as typed (``early_keys``)."""
    from loomterm.tui.early_keys import keys_as_typed

    with keys_as_typed():
        opening = plan_opening(args)
        code = run_opening(*opening) if opening is not None else run_loaded(args)
    if opening is not None:
        _leave_abandoned_load(opening[0], code)
    return _leave_now(code)


def _leave_now(code: int) -> int:
    """The editor has ended: its session is saved and closed and what became of it is
    said. On a terminal, leave without the interpreter's teardown (seconds on a busy
    machine with torch or llama.cpp loaded, past the 1 s that quitting promises); a
    caller in this process without a terminal (a test) gets ``code`` back."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def run_loaded(args: argparse.Namespace) -> int:
    """The editor on a session whose model is loaded first (see :func:`run_editor`)."""
    before = sessions_now(_asked_for(args))  # before open_session writes a new one
    loom, name = open_session(args)
    from loomterm.sessions.session import close_session
    from loomterm.tui.sessions import is_read_only, session_file

    app = None
    start = session_file(loom)
    try:
        from loomterm.tui.app import LoomApp

        app = LoomApp(loom, session_name=name)
        app.run()
    finally:
        close_session(loom)
        if app is not None:
            _give_up_loading(app)
            _close_last(cast("Loom", app.loom))  # the editor never holds a preview here
    if app is not None and app.return_code:  # the editor stopped on an error it reported
        return _past_busy_engine(app, app.return_code)
    if app is not None and start is not None:
        last = cast("Loom", app.loom)
        say_how_it_ended(start, before, session_file(last), is_read_only(last))
    return _past_busy_engine(app, 0)


def plan_opening(args: argparse.Namespace) -> tuple[SessionOpening, str] | None:
    """The session to open with the model loading in the background, and its name;
    None when the editor must wait for the model (see :func:`run_editor`)."""
    from loomterm.sessions.defaults import start_new_session
    from loomterm.sessions.identity import same_as_recorded
    from loomterm.sessions.opening import SessionOpening
    from loomterm.sessions.session import list_sessions, read_file, session_path
    from loomterm.store import SESSION_SUFFIX

    if getattr(args, "retokenize", False) or not (sys.stdin.isatty() and sys.stdout.isatty()):
        return None
    options = EngineOptions.from_args(args)
    read_only = getattr(args, "read_only", False)
    recent = None
    if args.session:
        path = session_path(args.session)
    else:
        recent = next((s for s in list_sessions() if s.error is None), None)
        path = recent.path if recent is not None else session_path(new_session_name())
    opened = read_file(path, read_only) if path.exists() else None
    if recent is not None and opened is not None and options.model is not None:
        # Another model means a new session: decided from the model folder's
        # fingerprint where that can be read without torch, else by loading first.
        same = same_as_recorded(opened.data.model, options)
        if same is None or (not same and read_only):
            opened.close()
            return None
        if not same:
            record = opened.data.model
            opened.close()
            say_new_session(recent.name, recent.model, switched_backend(record, options))
            path, opened = session_path(new_session_name()), None
    wanted = getattr(args, "attach", [])

    def attach(loom: Loom, progress) -> None:
        attach_more(loom, wanted, options, progress, quiet=True)

    opening = SessionOpening(
        path,
        options,
        opened,
        read_only=read_only,
        prepare=start_new_session,  # llama.cpp's samplers, or the model's generation_config
        attach=attach,
    )
    return opening, _name(path, SESSION_SUFFIX)


def run_opening(opening: SessionOpening, name: str) -> int:
    """Run the editor on ``opening``'s preview while its model loads."""
    from loomterm.sessions.session import close_session
    from loomterm.tui.app import LoomApp

    before = sessions_now(opening.path)  # before reserve() makes a new session's file
    opening.reserve()  # a new session's file now: typing during the load is saved
    app = LoomApp(opening.preview(), session_name=name, opening=opening)
    try:
        app.run()
    finally:
        opening.close()  # the model never came: the file's lock is given back
        if opening.unused:
            from loomterm.tui.sessions import delete

            with contextlib.suppress(OSError, LoomError):
                delete(opening.path)  # made for typing that never came: no empty session
        _give_up_loading(app)
        if opening.loom is not None:
            close_session(opening.loom)
            _close_last(cast("Loom", app.loom))  # the real Loom: the load finished
    if app.load_error is not None:
        if opening.typed is not None and opening.typed.text and opening.path.exists():
            print(f"loomterm: what you typed is kept in session {opening.path}", file=sys.stderr)
        raise app.load_error
    if app.return_code:  # the editor stopped on an error it reported: no "session" line
        return _past_busy_engine(app, app.return_code)
    if opening.loom is not None:
        from loomterm.tui.sessions import is_read_only, session_file

        last = cast("Loom", app.loom)  # the real Loom: the load finished
        say_how_it_ended(opening.path, before, session_file(last), is_read_only(last))
    elif opening.path.exists():  # quit during the load: what was typed is in the file
        say_how_it_ended(opening.path, before, opening.path, opening.read_only)
    return _past_busy_engine(app, 0)


def _leave_abandoned_load(opening: SessionOpening, code: int) -> None:
    """The editor quit while its model loaded: everything is saved and closed, but the
    load's thread may be deep in a download, a conversion or a connection that never
    answers. Leave now rather than wait for it (its caches are written to temporary
    names and renamed into place, so a load cut short leaves none half-written)."""
    if opening.still_loading:
        import os

        gguf = sys.modules.get("loomterm.engine.models.gguf")  # loaded if converting
        if gguf is not None:
            gguf.remove_partials()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _past_busy_engine(app, code: int) -> int:
    """``code``; but where the editor quit while the engine's job still ran (it did not
    stop within the editor's grace: ``tui.controllers.lifecycle``), leave the process
    now with it: the session is closed already, and the job's thread would hold the
    interpreter's exit (its caches are written atomically, so nothing is left
    half-written)."""
    if app is not None and app.jobs.running is not None:
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _give_up_loading(app) -> None:
    """The editor quit while a session switched to was loading its model: give its file
    back (and close its session if the load finished meanwhile)."""
    from loomterm.sessions.session import close_session

    loader = getattr(app, "loader", None)
    if loader is not None:
        loader.opening.close()
        if loader.opening.loom is not None:
            close_session(loader.opening.loom)


def _asked_for(args: argparse.Namespace) -> Path | None:
    """The session file ``-s`` names, if it names one that can be."""
    from loomterm.errors import SessionError
    from loomterm.sessions.session import session_path

    try:
        return session_path(args.session) if args.session else None
    except SessionError:
        return None  # opening says what is wrong with the name


def sessions_now(start: Path | None) -> set[Path]:
    """The session files there are before the editor runs (``start`` among them if it
    exists): what quitting calls saved rather than new."""
    from loomterm.config.locations import sessions_dir
    from loomterm.store import SESSION_SUFFIX

    found = {p.resolve() for p in sessions_dir().glob(f"*{SESSION_SUFFIX}") if p.is_file()}
    if start is not None and start.is_file():
        found.add(start.resolve())
    return found


def say_how_it_ended(
    start: Path, before: set[Path], end: Path | None, read_only: bool = False
) -> None:
    """Say on quitting, one line each, what became of the session the editor started
    in and (renamed, or another opened) the one it ended in: ``saved session NAME at
    PATH`` for one that was there before this run, ``new session NAME at PATH`` for one
    made in it; one quit with nothing written is deleted, and said so."""
    from loomterm.store import SESSION_SUFFIX

    def name(path: Path) -> str:
        return _name(path, SESSION_SUFFIX)

    def was_there(path: Path) -> bool:
        return path.resolve() in before

    lines = []
    renamed = end is not None and end != start and was_there(start) and not start.exists()
    if renamed:  # the start's file is now ``end``: one line, under its new name
        lines.append(f"saved session {name(end)} at {end} (renamed from {name(start)})")
    elif not start.exists():
        lines.append(f"session {name(start)} not kept: nothing was written in it")
    elif read_only and end in (None, start):
        lines.append(f"read-only session {name(start)} at {start} left as it was")
    else:
        kind = "saved session" if was_there(start) else "new session"
        lines.append(f"{kind} {name(start)} at {start}")
    if end is not None and end != start and not renamed and end.exists():
        kind = "saved session" if was_there(end) else "new session"
        lines.append(f"{kind} {name(end)} at {end}")
    for text in lines:
        say(f"loomterm: {text}")


def _close_last(loom: Loom) -> None:
    """Close the session the editor ended in (it may have switched); one that holds
    nothing is deleted, so a start quit with nothing written leaves no session."""
    from loomterm.sessions.session import close_session
    from loomterm.tui.sessions import discard_if_empty

    close_session(loom)
    discard_if_empty(loom)


def open_session(args: argparse.Namespace) -> tuple[Loom, str]:
    """The Loom to edit and its session's name, with load progress on stderr."""
    from loomterm.progress import end_progress_line, print_progress
    from loomterm.sessions.session import list_sessions, open_loom, session_path
    from loomterm.store import SESSION_SUFFIX, ModelMismatchError

    options = EngineOptions.from_args(args)
    try:
        if args.session:
            path = session_path(args.session)
            if path.exists():
                loom = _open(open_loom, path, args, options, print_progress)
                return loom, _name(path, SESSION_SUFFIX)
            return _create(path, args, options, print_progress), _name(path, SESSION_SUFFIX)
        recent = next((s for s in list_sessions() if s.error is None), None)
        if recent is not None:
            try:
                loom = _open(open_loom, recent.path, args, options, print_progress)
                return loom, recent.name
            except ModelMismatchError:
                end_progress_line()
                say_new_session(recent.name, recent.model)
        path = session_path(new_session_name())
        return _create(path, args, options, print_progress), _name(path, SESSION_SUFFIX)
    finally:
        end_progress_line()  # a failed stage leaves its line open before the error


def say_new_session(name: str, model: str, backends: tuple[str, str] | None = None) -> None:
    """The most recent session is on another model than ``--model``: say so; where it
    is the same model on another backend (``backends``: the session's, the one asked
    for), say that this is why, and how to continue the session instead."""
    if backends is None:
        say(
            f"loomterm: session {name!r} was made with {model}; "
            "starting a new session on the model asked for"
        )
        return
    old, new = backends
    say(
        f"loomterm: session {name!r} was made with {model} on {old}; on {new} it has "
        f"another fingerprint, so starting a new session (--backend {old} continues "
        f"{name!r})"
    )


def switched_backend(record: dict, options: EngineOptions) -> tuple[str, str] | None:
    """``(recorded, asked)`` backends when ``options`` asks for the model of a session's
    ``record`` (by name) on another backend than it was made on; else None."""
    from loomterm.sessions.opening import model_label

    if not options.model:
        return None
    names = {record.get("name"), model_label(record.get("source"))}
    if model_label(options.model) not in names:
        return None
    was = str(record.get("backend") or ("server" if "server" in record else "torch"))
    asked = options.backend if options.backend != "auto" else "torch"
    return (was, asked) if was != asked else None


def _name(path: Path, suffix: str) -> str:
    return path.name.removesuffix(suffix)


def require_terminal() -> None:
    """The editor draws on a terminal; say so plainly when there is none."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise LoomError("the editor needs a terminal; use --prompt TEXT for a one-shot completion")


def _open(
    open_loom, path: Path, args: argparse.Namespace, options: EngineOptions, progress
) -> Loom:
    from loomterm.sessions.session import close_session

    loom = open_loom(
        path,
        **options.load_kwargs(),
        progress=progress,
        read_only=getattr(args, "read_only", False),
        retokenize=getattr(args, "retokenize", False),
        reattach=True,
    )
    try:
        require_terminal()
        attach_more(loom, getattr(args, "attach", []), options, progress)
    except BaseException:
        close_session(loom)
        raise
    say(f"loomterm: session {path}")
    return loom


def _create(path: Path, args: argparse.Namespace, options: EngineOptions, progress) -> Loom:
    from loomterm.engine import Loom
    from loomterm.sessions.defaults import start_new_session
    from loomterm.sessions.session import save_loom

    loom = Loom.load(**options.load_kwargs(), progress=progress)
    start_new_session(loom)  # llama.cpp's samplers, or the model's generation_config
    require_terminal()  # before any file is written
    attach_more(loom, getattr(args, "attach", []), options, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(loom, path)
    say(f"loomterm: new session {path}")
    return loom


def new_session_name() -> str:
    """A fresh name from the time, e.g. ``session-20250131-142501``."""
    return time.strftime("session-%Y%m%d-%H%M%S")


# -- one-shot completion -----------------------------------------------------------------


def run_prompt(args: argparse.Namespace) -> int:
    """Load the model, generate greedily from the prompt, stream the text to stdout
    (the import of torch is the first stage of the progress on stderr)."""
    from loomterm.progress import end_progress_line, print_progress
    from loomterm.sessions.opening import check_server, import_engine

    check_server(getattr(args, "model", None))  # absent: the default model
    try:
        import_engine(print_progress)
        from loomterm.engine import Loom

        loom = Loom.load(**EngineOptions.from_args(args).load_kwargs(), progress=print_progress)
    finally:
        end_progress_line()  # a failed stage leaves its line open before the error

    runner = loom.runner
    prompt = args.prompt
    node = loom.append(loom.root, prompt)
    dtype = runner.identity().get("dtype", "")
    say(f"[{runner.name} on {runner.where}, {dtype}]")
    if args.prompt is not None:
        print(for_stream(prompt, sys.stdout), end="", flush=True)

    def show(_node, token_id: int, piece: str) -> None:
        if token_id not in loom.eos_ids:  # the end-of-turn marker is not text
            print(for_stream(piece, sys.stdout), end="", flush=True)

    max_new_tokens = getattr(args, "max_new_tokens", PROMPT_TOKENS)
    from loomterm.engine.text_prefix import AfterTyped

    # A healed word's typed part is printed already.
    loom.generate(node, max_new_tokens, temperature=0, on_token=AfterTyped(show))
    print()
    return 0
