"""The editor's actions, one mixin class per area, mixed into
:class:`~loomterm.tui.app.LoomApp`:

- ``navigation.py``: where the document stands (siblings, branch points, undo and redo,
  go-to, the branch pane's selection) and how it arrives there;
- ``generation.py``: generate, generate N, regenerate, streaming, stop, recompute;
- ``alternatives.py``: a token's top alternatives and picking one;
- ``bookmarks.py``: bookmarks, and archiving (hiding) branches;
- ``chat.py``: new chats and turns through the chat template;
- ``presets.py``: sampler presets from the palette, and which one is in use;
- ``sessions.py``: the session picker, and switching sessions in place;
- ``context.py``: memory, author's note and world info, and the context view;
- ``looks.py``: themes, the key map and the help screen's rows;
- ``lifecycle.py``: prefill progress, read-only sessions, quitting;
- ``view.py``: the branch pane, focus, view toggles, and the settings, export and
  help dialogs;
- ``weave.py``: weave, growing the tree from the caret by itself, and its dialog;
- ``search.py``: search across every branch, going to a hit, next and previous hit;
- ``ratings.py``: rating branches good or bad, and the branch pane's rating filter;
- ``hygiene.py``: split, merge and move (undoable; its undo and redo wrap
  navigation's, so it comes before ``NavigationActions`` in the app's bases).

The mixins hold ``action_*`` methods (run by bindings, the key map and the palette) and
``on_*`` message handlers, and use the app's state and plumbing (``self.doc``,
``self.view``, ``self.loom``, ``submit``, ``when_idle``) directly; the app builds that
state. Message handlers here must be named ``on_<message>``: Textual registers
``@on(...)`` handlers only on classes built by its metaclass, so ``@on`` on a plain mixin
is silently never called.
"""

from loomterm.tui.actions.alternatives import AlternativeActions
from loomterm.tui.actions.bookmarks import BookmarkActions
from loomterm.tui.actions.chat import ChatActions
from loomterm.tui.actions.context import ContextActions
from loomterm.tui.actions.generation import GenerationActions, Streamer
from loomterm.tui.actions.hygiene import HygieneActions
from loomterm.tui.actions.lifecycle import LifecycleActions
from loomterm.tui.actions.looks import LookActions
from loomterm.tui.actions.navigation import NavigationActions
from loomterm.tui.actions.presets import PresetActions
from loomterm.tui.actions.ratings import RatingActions
from loomterm.tui.actions.search import SearchActions
from loomterm.tui.actions.sessions import SessionActions
from loomterm.tui.actions.view import ViewActions
from loomterm.tui.actions.weave import WeaveActions

__all__ = [
    "AlternativeActions",
    "BookmarkActions",
    "ChatActions",
    "ContextActions",
    "GenerationActions",
    "HygieneActions",
    "LifecycleActions",
    "LookActions",
    "NavigationActions",
    "PresetActions",
    "RatingActions",
    "SearchActions",
    "SessionActions",
    "Streamer",
    "ViewActions",
    "WeaveActions",
]
