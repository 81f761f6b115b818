"""The editor's areas not yet turned into controllers (``loomterm.tui.controllers``):
one mixin class per area, mixed into :class:`~loomterm.tui.app.LoomApp`:

- ``generation.py``: generate, generate N, regenerate, streaming, stop, recompute;
- ``alternatives.py``: a token's top alternatives and picking one;
- ``chat.py``: new chats and turns through the chat template;
- ``sessions.py``: the session picker, and switching sessions in place;
- ``context.py``: memory, author's note and world info, and the context view;
- ``lifecycle.py``: prefill progress, read-only sessions, quitting;
- ``models.py``: several models in one tree, their colours, blind mode;
- ``caret.py``: the caret reported to the session, and found again.

The mixins hold ``action_*`` methods (run by bindings, the key map and the palette) and
``on_*`` message handlers, and use the app's state and controllers (``self.doc``,
``self.view``, ``self.loom``, ``self.jobs``, ``self.navigation``) directly. Message
handlers here must be named ``on_<message>``: Textual registers ``@on(...)`` handlers
only on classes built by its metaclass, so ``@on`` on a plain mixin is silently never
called.
"""

from loomterm.tui.actions.alternatives import AlternativeActions
from loomterm.tui.actions.chat import ChatActions
from loomterm.tui.actions.context import ContextActions
from loomterm.tui.actions.generation import GenerationActions, Streamer
from loomterm.tui.actions.lifecycle import LifecycleActions
from loomterm.tui.actions.sessions import SessionActions

__all__ = [
    "AlternativeActions",
    "ChatActions",
    "ContextActions",
    "GenerationActions",
    "LifecycleActions",
    "SessionActions",
    "Streamer",
]
