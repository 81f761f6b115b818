"""The one area of the editor not yet turned into a controller
(``loomterm.tui.controllers``): ``lifecycle.py``, prefill and model-loading progress,
read-only sessions and quitting, a mixin of :class:`~loomterm.tui.app.LoomApp`.

Its message handlers must be named ``on_<message>``: Textual registers ``@on(...)``
handlers only on classes built by its metaclass, so ``@on`` on a plain mixin is
silently never called.
"""

from loomterm.tui.actions.lifecycle import LifecycleActions

__all__ = ["LifecycleActions"]
