"""The editor's controllers: one object per area, made in
:class:`~loomterm.tui.app.LoomApp`'s ``__init__``, holding that area's state. The app's
actions and message handlers are one line each that ask them. Each controller knows the
app only as :class:`~loomterm.tui.controllers.editor.Editor` (a protocol), never by
importing it.

- ``jobs.py``: the engine worker: its queue, cancel and interrupt, edit locks, jobs in
  flight, and the actions waiting for it to be idle;
- ``navigation.py``: where the document stands (siblings, branch points, undo and redo
  between places, going to a node) and where entering a subtree lands;
- ``tidy.py``: split, merge and move (undoable; its undo and redo fall back to
  navigation's);
- ``bookmarks.py``: bookmarks, and archiving (hiding) branches;
- ``ratings.py``: rating branches good or bad, and the branch pane's rating filter;
- ``search.py``: search across every branch, its hits;
- ``weave.py``: weave, growing the tree from the caret by itself, its progress;
- ``presets.py``: sampler presets from the palette, and which one is in use;
- ``looks.py``: themes, the key map and the help screen's rows;
- ``panes.py``: the branch pane (shown, width, focus) and the document's view marks;
- ``dialogs.py``: the settings, export and help dialogs;
- ``editor.py``: :class:`Editor`, what the controllers may use of the app.
"""
