"""The editor's controllers: one object per area, made in
:class:`~loomterm.tui.app.LoomApp`'s ``__init__``, holding that area's state and owning
its actions: the methods marked ``@key_action`` (``actions.py``) are the key table's
(``LoomApp.run_action`` runs them). The app's message handlers hand each message to its controller. A controller knows the
app only as :class:`~loomterm.tui.controllers.editor.Editor` (a protocol), never by
importing it, and is handed the other controllers it uses in its constructor.

- ``jobs.py``: the engine worker: its queue, cancel and interrupt, edit locks, jobs in
  flight, and the actions waiting for it to be idle;
- ``typing.py``: typed text on its way to the engine (the sync after a pause), the run
  of nodes typing writes into, "branch here";
- ``status.py``: the status bar and the window title;
- ``failures.py``: what a failed job says (and a model that cannot load does);
- ``swap.py``: which Loom is open, hearing its events, putting another in its place (a
  session switched to, the real Loom for the loading preview);
- ``navigation.py``: where the document stands (siblings, branch points, undo and redo
  between places, going to a node) and where entering a subtree lands;
- ``generation.py``: generate, generate N, regenerate, stop, recompute, streaming onto
  the screen;
- ``generation_job.py``: one generation as the worker runs it (``GenerationJob``, its
  messages, and ``Streamer``, which batches its tokens);
- ``tidy.py``: split, merge and move (undoable; its undo and redo fall back to
  navigation's);
- ``alternatives.py``: a token's top alternatives and picking one;
- ``models.py``: several models in one tree: the active one, colours, the legend,
  blind mode;
- ``bookmarks.py``: bookmarks, and archiving (hiding) branches;
- ``tree_map.py``: the tree map, its layout kept per version of the tree;
- ``hoist.py``: hoisting, working inside one branch as if it were the whole tree;
- ``ratings.py``: rating branches good or bad, and the branch pane's rating filter;
- ``search.py``: search across every branch, its hits;
- ``weave.py``: weave, growing the tree from the caret by itself, its progress;
- ``chat.py``: new chats and turns through the chat template;
- ``sessions.py``: the session picker, and switching sessions in place;
- ``context.py``: memory, author's note and world info, and the context view;
- ``progress.py``: reading a long text (escape stops it) and loading a model, for the
  status bar;
- ``lifecycle.py``: read-only sessions (changes offered as a new session) and quitting;
- ``caret.py``: the caret reported to the session once it rests, and found again;
- ``presets.py``: sampler presets from the palette, and which one is in use;
- ``looks.py``: themes, the key map and the help screen's rows;
- ``panes.py``: the branch pane (its contents, shown, width, focus) and the document's
  view marks;
- ``dialogs.py``: the settings, export and help dialogs;
- ``actions.py``: marking a method as a key's action, and gathering them;
- ``editor.py``: :class:`Editor`, what the controllers may use of the app.
"""
