"""The Textual editor (``loomterm`` with no subcommand). Imported only when the editor
starts, so headless commands never load Textual.

Layout of the package:

- ``app.py``: :class:`~loomterm.tui.app.LoomApp`, its composition and bindings, and the
  glue to the engine: one thread worker runs model jobs in order and reports back with
  messages, each declared beside the controller that posts it (``Jobs.Finished``,
  ``Generation.Streamed``, ``Typing.Synced``); navigation reads the tree on the UI
  thread.
- ``message_routes.py``: the app's message handlers (mixed into ``LoomApp``), each
  handing its message to the controllers that asked for the work.
- ``editor_loom.py``: :class:`EditorLoom`, what the editor uses of a Loom (the loading
  stand-in's and the real one's).
- ``actions/``: what the keys do, one mixin of ``LoomApp`` per area: navigation,
  generation (and streaming), alternatives, bookmarks and archiving, chat, presets,
  sessions (the picker, switching in place), view.
- ``document.py``: the text on screen as token blocks (``blocks.py``), local (not yet
  synced) edits and the wrapped layout. No Textual. ``sanitize.py`` makes every character safe to draw.
- ``ops.py`` (engine steps for the worker), ``chat.py`` (chat-template turns),
  ``history.py`` (undo/redo as navigation), ``sessions.py`` (session files: list,
  open in place, save as, rename, delete), ``defaults.py`` (a new session's samplers
  and where each value came from): no Textual either.
- ``paste.py``: bracketed pastes read whole by the terminal parser, and a paste's line
  breaks.
- ``keymap.py``: every action with its default key; ``commands.py``: the command
  palette; ``themes.py``: ``themes/*.tcss`` and user themes; ``prefs.py``: the theme and
  view toggles the user chose last.
- ``widgets/``: the document pane, the branch pane, the status bar and the dialogs.

Files in the config folder (``loomterm.config.locations.config_dir()``):

- ``keymap.toml`` or ``keymap.json``: ``action_id = "keys"`` (ids in ``keymap.py``);
- ``themes/NAME.tcss``: user themes (copy a bundled one to start);
- ``tui.json``: the remembered theme and view toggles (written by the app).
"""
