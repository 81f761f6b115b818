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


class Worker:
    """Runs what waits at once, and notes how it was asked to wait."""

    def __init__(self) -> None:
        self.waited: list[tuple[bool, bool]] = []

    def when_idle(self, action, *, sync: bool = True, stop: bool = False) -> None:
        self.waited.append((sync, stop))
        action()


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
        key_actions([First(), Second()], Worker())


def test_a_waiting_mark_hands_the_method_to_the_worker_with_its_parameters():
    class Steps:
        def __init__(self) -> None:
            self.steps: list[int] = []

        @key_action("go", when_idle=True, stop=True, sync=False)
        def step(self, step: int) -> None:
            """Step."""
            self.steps.append(step)

    steps, worker = Steps(), Worker()
    key_actions([steps], worker)["go"](-1)
    assert steps.steps == [-1] and worker.waited == [(False, True)]
