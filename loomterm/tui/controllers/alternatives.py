"""Token alternatives: the top choices the model weighed for one token (the token at
the caret, ctrl+a by default; or a right-click, ctrl+click or double-click on one), and
picking one, which makes a branch there (optionally generating on) as a worker job.
"""

from __future__ import annotations

from dataclasses import dataclass

from loomterm.engine.text_prefix import healed_count
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.controllers.navigation import Navigation
from loomterm.tui.widgets.alternatives import (
    Alternative,
    AlternativesScreen,
    Pick,
    chosen_summary,
    shown_piece,
)


@dataclass(eq=False, repr=False)
class Alternatives(Controller):
    """A token's alternatives, and picking one."""

    def clicked(self, char: int) -> None:
        """A token was clicked: its alternatives, once the engine is free."""
        self.jobs.when_idle(lambda: self.show(char))

    @key_action("alternatives", when_idle=True)
    def show(self, char: int | None = None) -> None:
        """The alternatives of the token at ``char`` (None: at the caret)."""
        app = self.app
        doc = app.doc
        found = doc.token_under_caret() if char is None else doc.token_at(min(char, doc.length - 1))
        if found is None:
            app.notify("No token here", timeout=2)
            return
        node, index, position = found
        top = node.top[index] if index < len(node.top) else None
        if not top:
            why = "nothing comes before it" if position == 0 else "none were recorded"
            app.notify(f"No alternatives for this token: {why}", timeout=3)
            return
        chosen = node.tokens[index]
        loom = app.loom
        rows = [Alternative(t, app.panes.token_text(t), lp, chosen=t == chosen) for t, lp in top]
        logprob = node.logprobs[index] if index < len(node.logprobs) else None
        title = (
            f"Alternatives at token {position} (now {shown_piece(app.panes.token_text(chosen))}, "
            f"{chosen_summary(rows, logprob)})"
        )
        healed = healed_text(node, index, loom.codec.token_bytes)
        if healed is not None:  # the probabilities are among the tokens that spell it
            title += f" \u00b7 healed: spells the typed {shown_piece(healed)}"
        base = doc.node or node

        def picked(pick: Pick | None) -> None:
            if pick is None:
                return

            def job() -> None:
                branch = loom.pick(base, position, pick.token_id)
                app.post_message(Navigation.Moved(branch, then_generate=pick.generate))

            self.jobs.when_idle(lambda: self.jobs.submit("pick", job, lock=True))

        app.push_screen(AlternativesScreen(title, rows), picked)


def healed_text(node, index: int, token_bytes) -> str | None:
    """The typed text that token ``index`` of ``node`` helped spell again by token
    healing (``node.meta["healed"]``), None when it is not a healed token. A healed
    token's probabilities are among the tokens that could spell that text."""
    typed = node.meta.get("healed")
    if not isinstance(typed, str) or not typed:
        return None
    count = healed_count([token_bytes(t) for t in node.tokens[:32]], typed.encode())
    return typed if index < count else None
