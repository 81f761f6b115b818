"""Several models in one tree: switch the active model, attach one (a server URL or a
local model), ask several for siblings at once, colour who wrote what, and blind mode.

- Colours: with two or more models in the tree's table, the document and the branch
  pane draw each model's text in its own theme colour (``$loom-model-1..6``, in table
  order), and the legend line under the document names them.
- ``ctrl+n`` with one model generates N siblings as always; with several attached it
  opens a dialog: how many siblings each model writes.
- Blind mode (``alt+w``, "who wrote it?"): siblings asked of several models in blind mode are written in
  a shuffled order and marked ``meta["blind"]`` (one id per request); while blind mode
  is on, their colours (and the legend's count of them) stay hidden until the user
  *picks* one. Picking a branch means continuing it: generating from inside or after
  one of the siblings (``ctrl+g``, ``ctrl+n``), typing into or after it, rating it
  (``meta["rating"]``, good or bad), bookmarking it (``alt+s``), or ``alt+p`` (Pick
  this branch). Moving among the siblings, reading them,
  regenerating one (``ctrl+r``) or opening the alternatives do not pick. Picking
  reveals the whole group (the mark is removed from the file too).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.tree import Node
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.widgets.models import AttachScreen, ModelLegend, SiblingsScreen

if TYPE_CHECKING:
    from loomterm.tui.controllers.generation import Generation
    from loomterm.tui.controllers.navigation import Navigation
    from loomterm.tui.controllers.swap import Swap

N_COLOURS = 6


def source_label(source: str) -> str:
    """A model value shortened for the status bar: its file or folder name."""
    from loomterm.sessions.opening import model_label

    return model_label(source)


def blind_group(node: Node | None) -> tuple[Node, object] | None:
    """The first node on ``node``'s path still marked blind, and its group id."""
    while node is not None:
        group = node.meta.get("blind")
        if group is not None:
            return node, group
        node = node.parent
    return None


@dataclass(eq=False, repr=False)
class Models(Controller):
    """The models of the tree: the active one, their colours and legend, blind mode."""

    navigation: Navigation
    generation: Generation
    blind: bool = field(default=False, init=False)
    """Blind mode: siblings from several models hide who wrote them until picked."""
    # the app composes it
    legend: ModelLegend = field(default_factory=lambda: ModelLegend(id="model-legend"), init=False)
    # model key -> colour (two or more models)
    colours: dict[str, str] = field(default_factory=dict, init=False)
    # blind groups the user has picked from
    revealed: set[object] = field(default_factory=set, init=False)
    # the last plan asked for
    sibling_counts: list[tuple[str, int]] = field(default_factory=list, init=False)

    def mounted(self) -> None:
        """The app is mounted: colour the writers, and say which models are missing."""
        app = self.app
        app.view.writer_colour = self.writer_colour
        app.branches.writer_colour = self.writer_colour
        app.theme_changed_signal.subscribe(app, lambda _theme: self.changed())
        self.changed()
        self.show_notes()

    def show_notes(self) -> None:
        """Say, one line each, which of the session's models did not come back when it
        was reopened, and why (their branches stay, recorded)."""
        for key, why in self.app.loom.model_notes.items():
            self.app.notify(
                f"Model {key} was not re-attached: {why}; its branches stay (recorded)",
                severity="warning",
                timeout=10,
            )

    # -- colours -----------------------------------------------------------------------
    def writer_colour(self, node: Node) -> str | None:
        """The colour of the model that wrote ``node``; None for text no model wrote, a
        tree of one model, and (in blind mode) siblings not picked yet."""
        key = node.meta.get("model")
        if key is None:
            return None
        if self.blind:
            group = node.meta.get("blind")
            if group is not None and group not in self.revealed:
                return None
        return self.colours.get(key)

    def changed(self) -> None:
        """The table, the active model, the theme or blindness changed: recolour."""
        app = self.app
        table = app.loom.model_table
        variables = app.get_css_variables()
        colours = {}
        if len(table) > 1:
            for i, key in enumerate(table):
                colours[key] = variables.get(f"loom-model-{i % N_COLOURS + 1}", "#2aa198")
        self.colours = colours
        self.refresh_legend()
        app.view.redraw()
        app.branches.refresh()

    def refresh_legend(self) -> None:
        """The legend line: each model's colour, the active one, and (blind) how many
        branches still hide their writer."""
        loom = self.app.loom
        attached = loom.models
        entries = [
            (key, self.colours.get(key), key == loom.active_model, key in attached)
            for key in loom.model_table
        ]
        waiting = 0
        if self.blind:
            revealed = self.revealed
            nodes = list(loom.tree.nodes.values())
            waiting = sum(1 for n in nodes if "blind" in n.meta and n.meta["blind"] not in revealed)
        self.legend.show_models(entries, self.blind, waiting)

    def loom_changed(self, message: Swap.LoomChanged) -> None:
        """The loom's models changed, or a node was rated or bookmarked (a pick)."""
        if message.event == "models":
            self.changed()
        elif message.event == "update" and message.node is not None:
            meta = message.node.meta
            if meta.get("rating"):  # rated good or bad (``controllers.ratings``)
                self.picked(message.node, "rated")
            elif meta.get("bookmark"):
                self.picked(message.node, "bookmarked")
        elif message.event == "add" and self.blind:
            self.refresh_legend()

    # -- switching and attaching -----------------------------------------------------
    def attached(self) -> list[str]:
        """The keys of the models attached now."""
        return list(self.app.loom.models)

    @key_action("next_model")
    def next(self) -> None:
        """Make the next attached model the active one."""
        keys = self.attached()
        if len(keys) < 2:
            self.app.notify(
                "One model only: attach another from the palette (Attach model)", timeout=3
            )
            return
        current = self.app.loom.active_model
        self.use(keys[(keys.index(current) + 1) % len(keys)])

    def use(self, key: str) -> None:
        """Make ``key`` the active model (a job, once idle)."""
        app = self.app
        loom = app.loom

        def job() -> None:
            loom.use(key)

        self.jobs.when_idle(lambda: self.jobs.submit("use model", job), stop=True)
        app.notify(f"Active model: {key}", timeout=2)

    @key_action("attach_model")
    def ask_attach(self) -> None:
        """The attach dialog: a server URL or a local model."""

        def done(source: str | None) -> None:
            if source:
                self.attach(source)

        self.app.push_screen(AttachScreen(), done)

    def show_details(self) -> None:
        """The model view: each model, where it runs, what goes to a server."""
        from loomterm.tui.widgets.model_details import ModelDetailsScreen, model_lines

        self.app.push_screen(ModelDetailsScreen(model_lines(self.app.loom)))

    def attach(self, source: str) -> None:
        """Load or connect to ``source`` on the engine worker and attach it; a model
        that cannot join is one line (the worker's error notice)."""
        app = self.app
        loom = app.loom
        app.notify(f"Attaching {source}\u2026", timeout=3)

        def progress(stage: str, done: int, total: int | None) -> None:
            app.progress.load(f"{source_label(source)}: {stage}", done, total)

        def job() -> None:
            from loomterm.engine.open import RunnerOptions

            # The session's own engine options (backend, threads, precision) hold for
            # the model attached beside it: one road (``engine.open``) for both.
            opened = getattr(loom.runner, "options", None)
            options = opened.for_another(source) if isinstance(opened, RunnerOptions) else {}
            # Hashing and converting a GGUF file takes a minute: the status bar shows it.
            key = loom.open_model(source, progress=progress, **options)
            app.call_from_thread(app.notify, f"Attached {key}: alt+l switches to it", timeout=4)

        self.jobs.submit("attach model", job)

    # -- siblings from several models --------------------------------------------------
    @key_action()
    def siblings(self) -> None:
        """ctrl+n: N siblings from the active model, or (several attached) the dialog."""
        app = self.app
        keys = self.attached()
        if len(keys) < 2:
            self.generation.generate_n()
            return
        last = dict(self.sibling_counts)
        n = max(1, app.loom.settings.n)
        counts = [(key, last.get(key, n if key == app.loom.active_model else 1)) for key in keys]

        def done(plan: list[tuple[str, int]] | None) -> None:
            if plan:
                self.sibling_counts = plan
                self.generate_from(plan)

        app.push_screen(SiblingsScreen(counts, self.blind), done)

    def generate_from(self, plan: list[tuple[str, int]]) -> None:
        """Siblings from several models at the caret, in one generation. In blind mode
        each sibling is its own request, in a shuffled order, marked blind."""
        meta = None
        if self.blind:
            singles = [(key, 1) for key, count in plan for _ in range(count)]
            random.shuffle(singles)
            plan = singles
            meta = {"blind": int(time.time() * 1000)}
        total = sum(count for _key, count in plan)
        generation = self.generation
        self.jobs.when_idle(lambda: generation.generate(total, models=plan, meta=meta), sync=False)

    # -- blind mode --------------------------------------------------------------------
    @key_action()
    def toggle_blind(self) -> None:
        """Blind mode on or off."""
        self.blind = not self.blind
        self.app.notify(
            "Blind mode on: siblings from several models hide who wrote them until you "
            "pick one (continue, type, bookmark or alt+p)"
            if self.blind
            else "Blind mode off: every model's colour shows",
            timeout=4,
        )
        self.changed()

    @key_action()
    def pick_branch(self) -> None:
        """alt+p: pick the branch at the caret (reveals its blind group)."""
        app = self.app
        node = self.navigation.caret_node() or app.doc.node
        if not self.picked(node, "picked"):
            app.notify("No hidden siblings here to pick", timeout=2)

    def picked(self, node: Node | None, how: str) -> bool:
        """The user picked the branch ``node`` is on: reveal its blind group."""
        found = blind_group(node)
        if found is None:
            return False
        first, group = found
        if group in self.revealed:
            return False
        self.revealed.add(group)
        siblings = [
            n
            for n in (first.parent.children if first.parent else [])
            if n.meta.get("blind") == group
        ]
        for sibling in siblings:
            self.jobs.set_meta(sibling, blind=None)
        if self.blind:
            writer = first.meta.get("model", "?")
            self.app.notify(f"You {how} a branch by {writer}: models revealed", timeout=5)
        self.changed()
        return True

    def session_switched(self) -> None:
        """Another session (another loom) is open now: its models, its colours."""
        self.app.call_after_refresh(self.changed)
        self.app.call_after_refresh(self.show_notes)
