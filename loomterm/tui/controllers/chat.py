"""Chat actions: start a chat (system and user turns through the model's chat
template, in this session if it is empty, else, once the user agrees, in a new session
on the same model, see ``Sessions``), and add a user turn. The template work itself
is in ``loomterm.tui.chat``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from loomterm.tui import chat, ops
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.controllers.navigation import Navigation
from loomterm.tui.controllers.sessions import Sessions
from loomterm.tui.widgets.dialogs import (
    ChatRequest,
    ChatScreen,
    ConfirmScreen,
    TurnRequest,
    TurnScreen,
)

if TYPE_CHECKING:
    from loomterm.tui.controllers.looks import Looks


@dataclass(eq=False, repr=False)
class Chat(Controller):
    """Chats and their turns."""

    looks: Looks

    def has_template(self) -> bool:
        """Whether the model has a chat template; a warning says so when it has none."""
        if chat.has_template(self.app.loom.runner.tokenizer):
            return True
        self.app.notify("This model has no chat template", severity="warning")
        return False

    @key_action("new_chat")
    def new(self) -> None:
        """Ask for a new chat's turns (first, if this session has text, whether to
        start it in a new session)."""
        app = self.app
        if not self.has_template():
            return

        def chosen(request: ChatRequest | None) -> None:
            if request is not None:
                self.jobs.when_idle(lambda: self.start(request), stop=True)

        if not app.loom.root.children:
            app.push_screen(ChatScreen(), chosen)
            return

        def go_on(yes: bool | None) -> None:
            if yes:
                app.push_screen(ChatScreen(), chosen)

        name = app.session_name or "this session"
        app.push_screen(
            ConfirmScreen(
                f"{name!r} has text, so the chat starts in a new session. {name!r} is "
                "kept: 'Back to previous session' (palette) or the session list "
                f"({self.looks.key_for('sessions')}) brings you back.",
                yes="New session",
            ),
            go_on,
        )

    def start(self, request: ChatRequest) -> None:
        """Turns through the chat template, in this session if it is empty, else in a
        new one on the same model."""
        app = self.app
        old = app.loom
        in_new_session = bool(old.root.children)

        def job() -> None:
            turns = chat.opening_turns(old.runner.tokenizer, request.system, request.user)
            loom, name = ops.new_session_like(old, request.name) if in_new_session else (old, "")
            node = loom.root
            for role, text in turns:
                meta = {"role": role} if role else {}
                node = loom.append(node, text, **meta)
            if loom is old:
                app.post_message(Navigation.Moved(node, then_generate=request.generate))
            else:
                app.post_message(Sessions.Switched(loom, name, node, request.generate))

        self.jobs.submit("chat", job, lock=True)

    @key_action("add_turn")
    def ask_turn(self) -> None:
        """Ask for the next user turn."""
        if not self.has_template():
            return

        def chosen(request: TurnRequest | None) -> None:
            if request is not None:
                self.jobs.when_idle(lambda: self.add_turn(request), stop=True)

        self.app.push_screen(TurnScreen(), chosen)

    def add_turn(self, request: TurnRequest) -> None:
        """The user's turn (and the template's next header) after the document."""
        app = self.app
        loom = app.loom
        base = app.doc.node or loom.root
        # The template is matched against the turn markers, which are not in the text.
        document = loom.codec.written(loom.tokens(base))

        def job() -> None:
            node = base
            for role, text in chat.next_turns(loom.runner.tokenizer, document, request.text):
                meta = {"role": role} if role else {}
                node = loom.append(node, text, **meta)
            app.post_message(Navigation.Moved(node, then_generate=request.generate))

        self.jobs.submit("turn", job, lock=True)
