"""Chat actions: start a chat (system and user turns through the model's chat
template, in this session if it is empty, else, once the user agrees, in a new session
on the same model, see ``sessions.py``), and add a user turn. The template work itself
is in ``loomterm.tui.chat``.
"""

from __future__ import annotations

from loomterm.tui import chat, ops
from loomterm.tui.messages import Moved, SessionSwitched
from loomterm.tui.widgets.dialogs import (
    ChatRequest,
    ChatScreen,
    ConfirmScreen,
    TurnRequest,
    TurnScreen,
)


class ChatActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: chats and their turns."""

    def action_new_chat(self) -> None:
        if not chat.has_template(self.loom.runner.tokenizer):
            self.notify("This model has no chat template", severity="warning")
            return

        def chosen(request: ChatRequest | None) -> None:
            if request is not None:
                self.jobs.when_idle(lambda: self._start_chat(request), stop=True)

        if not self.loom.root.children:
            self.push_screen(ChatScreen(), chosen)
            return

        def go_on(yes: bool | None) -> None:
            if yes:
                self.push_screen(ChatScreen(), chosen)

        name = self.session_name or "this session"
        self.push_screen(
            ConfirmScreen(
                f"{name!r} has text, so the chat starts in a new session. {name!r} is "
                "kept: 'Back to previous session' (palette) or the session list "
                f"({self.looks.key_for('sessions')}) brings you back.",
                yes="New session",
            ),
            go_on,
        )

    def _start_chat(self, request: ChatRequest) -> None:
        """Turns through the chat template, in this session if it is empty, else in a
        new one on the same model."""
        old = self.loom
        in_new_session = bool(old.root.children)

        def job() -> None:
            turns = chat.opening_turns(old.runner.tokenizer, request.system, request.user)
            loom, name = ops.new_session_like(old, request.name) if in_new_session else (old, "")
            node = loom.root
            for role, text in turns:
                meta = {"role": role} if role else {}
                node = loom.append(node, text, **meta)
            if loom is old:
                self.post_message(Moved(node, then_generate=request.generate))
            else:
                self.post_message(SessionSwitched(loom, name, node, request.generate))

        self.jobs.submit("chat", job, lock=True)

    def action_add_turn(self) -> None:
        if not chat.has_template(self.loom.runner.tokenizer):
            self.notify("This model has no chat template", severity="warning")
            return

        def chosen(request: TurnRequest | None) -> None:
            if request is not None:
                self.jobs.when_idle(lambda: self._add_turn(request), stop=True)

        self.push_screen(TurnScreen(), chosen)

    def _add_turn(self, request: TurnRequest) -> None:
        loom = self.loom
        base = self.doc.node or loom.root
        document = self.doc.text

        def job() -> None:
            node = base
            for role, text in chat.next_turns(loom.runner.tokenizer, document, request.text):
                meta = {"role": role} if role else {}
                node = loom.append(node, text, **meta)
            self.post_message(Moved(node, then_generate=request.generate))

        self.jobs.submit("turn", job, lock=True)
