"""The key table's actions are the controllers' marked methods (``@key_action``): every
action of the table runs one, and a mark that two controllers share is refused at once."""

from __future__ import annotations

import pytest
from textual.actions import parse

from loomterm.tui.controllers.actions import key_action, key_actions
from loomterm.tui.keymap import ACTIONS
from tests.tui.conftest import TERMINAL


async def test_every_action_of_the_key_table_runs_a_controller_method_or_the_apps(make_app):
    app = make_app()
    async with app.run_test(size=TERMINAL):
        missing = []
        for action in ACTIONS:
            namespace, name, _params = parse(action.action)
            assert namespace in ("", "app"), action
            if name not in app.actions and not callable(getattr(app, f"action_{name}", None)):
                missing.append(action.id)
        assert not missing, f"key table actions nothing runs: {missing}"
        # what the controllers mark is what the table asks for, nothing left over
        asked = {parse(action.action)[1] for action in ACTIONS}
        asked.add("focus_document")  # the branch pane's enter runs it
        assert set(app.actions) <= asked, set(app.actions) - asked


def test_two_controllers_marking_one_action_is_refused():
    class First:
        @key_action("save")
        def keep(self) -> None:
            """Keep."""

    class Second:
        @key_action()
        def save(self) -> None:
            """Save."""

    with pytest.raises(ValueError, match="'save'"):
        key_actions([First(), Second()], jobs=None)  # type: ignore[arg-type]


def test_a_waiting_mark_hands_the_method_to_the_worker_with_its_parameters():
    waited: list[tuple] = []

    class Worker:
        def when_idle(self, action, *, sync=True, stop=False):
            waited.append((sync, stop))
            action()

    class Steps:
        def __init__(self) -> None:
            self.steps: list[int] = []

        @key_action("go", when_idle=True, stop=True, sync=False)
        def step(self, step: int) -> None:
            """Step."""
            self.steps.append(step)

    steps = Steps()
    key_actions([steps], Worker())["go"](-1)  # type: ignore[arg-type]
    assert steps.steps == [-1] and waited == [(False, True)]
