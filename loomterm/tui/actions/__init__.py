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
- ``view.py``: the branch pane, focus, view toggles, and the settings, export and
  help dialogs.

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
from loomterm.tui.actions.navigation import NavigationActions
from loomterm.tui.actions.presets import PresetActions
from loomterm.tui.actions.sessions import SessionActions
from loomterm.tui.actions.view import ViewActions

__all__ = [
    "AlternativeActions",
    "BookmarkActions",
    "ChatActions",
    "ContextActions",
    "GenerationActions",
    "NavigationActions",
    "PresetActions",
    "SessionActions",
    "Streamer",
    "ViewActions",
]
