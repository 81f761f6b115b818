"""The key table's actions: a controller marks the methods that keys run.

``@key_action("bookmark")`` over ``Bookmarks.toggle`` makes it the key table's
``bookmark`` action (``loomterm.tui.keymap``): :func:`key_actions` gathers the marked
methods of every controller for ``LoomApp.run_action``. An action that must wait for the
engine says so in its mark (``when_idle``, ``stop``, ``sync``: as
:meth:`~loomterm.tui.controllers.jobs.Jobs.when_idle` takes them) rather than in a method
of its own that only forwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

MARK = "key_action"  # the attribute a marked method carries
Method = TypeVar("Method", bound=Callable[..., Any])


class Waiter(Protocol):
    """What runs an action once the engine is idle (the editor's ``Jobs``)."""

    def when_idle(
        self, action: Callable[[], None], *, sync: bool = True, stop: bool = False
    ) -> None: ...


@dataclass(frozen=True)
class KeyAction:
    """What a mark says: the action's name, and how it waits for the engine."""

    name: str
    when_idle: bool = False
    stop: bool = False
    sync: bool = True


def key_action(
    name: str | None = None, *, when_idle: bool = False, stop: bool = False, sync: bool = True
) -> Callable[[Method], Method]:
    """Mark a controller method as the key table's action ``name`` (default: the
    method's own name). ``when_idle``: it runs once no job is in flight (``stop``: a
    generation running stops first; ``sync``: the typed text reaches the engine first)."""

    def mark(method: Method) -> Method:
        setattr(method, MARK, KeyAction(name or method.__name__, when_idle, stop, sync))
        return method

    return mark


def key_actions(controllers: Iterable[object], jobs: Waiter) -> dict[str, Callable[..., Any]]:
    """The marked methods of ``controllers``, by action name, bound and ready to run
    with the action's parameters. Two controllers marking one name is a mistake in the
    code, raised here (at start-up) rather than a key that runs the wrong thing."""
    actions: dict[str, Callable[..., Any]] = {}
    for controller in controllers:
        for attribute in dir(type(controller)):
            mark = getattr(getattr(type(controller), attribute), MARK, None)
            if not isinstance(mark, KeyAction):
                continue
            if mark.name in actions:
                raise ValueError(f"two controllers mark the action {mark.name!r}")
            method = getattr(controller, attribute)
            actions[mark.name] = _waiting(method, mark, jobs) if mark.when_idle else method
    return actions


def _waiting(method: Callable[..., Any], mark: KeyAction, jobs: Waiter) -> Callable[..., None]:
    def run(*params: Any) -> None:
        jobs.when_idle(partial(method, *params), stop=mark.stop, sync=mark.sync)

    return run
