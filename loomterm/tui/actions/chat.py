"""Chat actions: start a chat (system and user turns through the model's chat
template, in this session if it is empty, else in a new session on the same model),
add a user turn, and put a new session in place of the old one. The template work
itself is in ``loomterm.tui.chat``.
"""

from __future__ import annotations

from loomterm.tui import chat, ops
from loomterm.tui.history import History
from loomterm.tui.messages import Moved, SessionSwitched
from loomterm.tui.widgets.dialogs import ChatRequest, ChatScreen, TurnRequest, TurnScreen


class ChatActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: chats and their turns."""

    def action_new_chat(self) -> None:
        if not chat.has_template(self.loom.runner.tokenizer):
            self.notify("This model has no chat template", severity="warning")
            return

        def chosen(request: ChatRequest | None) -> None:
            if request is not None:
                self.when_idle(lambda: self._start_chat(request), stop=True)

        self.push_screen(ChatScreen(), chosen)

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

        self.submit("chat", job, lock=True)

    def on_session_switched(self, message: SessionSwitched) -> None:
        """Put the new session in place of the old one (which is saved and closed)."""
        from loomterm.session import close_session

        old, new = self.loom, message.loom
        old.unsubscribe(self._on_loom_event)
        close_session(old)
        self.loom = new  # type: ignore[assignment]
        self.session_name = message.name or self.session_name
        new.subscribe(self._on_loom_event)  # type: ignore[attr-defined]
        self.doc = self._new_document(new)  # type: ignore[arg-type]
        self.view.doc = self.doc
        self.history = History()
        self._last_seen.clear()
        self._text_cache.clear()
        self._rebuild_tree()
        self.on_moved(Moved(message.node, then_generate=message.then_generate))

    def action_add_turn(self) -> None:
        if not chat.has_template(self.loom.runner.tokenizer):
            self.notify("This model has no chat template", severity="warning")
            return

        def chosen(request: TurnRequest | None) -> None:
            if request is not None:
                self.when_idle(lambda: self._add_turn(request), stop=True)

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

        self.submit("turn", job, lock=True)
