"""Every key of the key table answers with something a person can see: a visible change
of the screen or a short notification (issue 32: F7 and F8 looked dead)."""

from __future__ import annotations

import pytest

from loomterm.tui.keymap import ACTIONS
from tests.tui.conftest import TERMINAL, settle, write_and_generate

# Keys whose silence is right: quitting ends the app, and escape with nothing to stop
# or leave is the usual no-op of every editor.
NOT_ASKED = {"quit", "stop"}
KEYED = [a for a in ACTIONS if a.key and a.id not in NOT_ASKED]


def _seen(app) -> tuple[list[tuple[str, str]], int]:
    """The screen's text with its styles (a colour change is a sign too), and how many
    notifications there are."""
    strips = app.screen._compositor.render_strips()  # noqa: SLF001 - no public dump
    cells = [(seg.text, str(seg.style)) for strip in strips for seg in strip]
    return cells, len(app._notifications)  # noqa: SLF001 - no public count


@pytest.mark.parametrize("where", ["ctrl+home", "ctrl+end"], ids=["at-start", "at-end"])
@pytest.mark.parametrize("action", KEYED, ids=[a.id for a in KEYED])
async def test_every_key_gives_feedback(make_app, action, where):
    """At the start of the text (where no branch is: the key must say so) and at its
    end (in generated text, where it acts)."""
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot)
        await pilot.press(where)
        await settle(pilot)
        app.clear_notifications()
        await pilot.pause(0.1)
        before = _seen(app)
        await pilot.press(action.key.split(",")[0])
        await settle(pilot)
        await pilot.pause(0.1)
        after = _seen(app)
        assert after != before, f"{action.key} ({action.id}) gave no visible sign"
