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
from typing import TYPE_CHECKING

from loomterm.tree import Node
from loomterm.tui.messages import GenerationStarted, LoomChanged, SessionSwitched, Synced
from loomterm.tui.widgets.models import AttachScreen, ModelLegend, SiblingsScreen

if TYPE_CHECKING:
    from loomterm.tui.app import LoomApp

N_COLOURS = 6


def source_label(source: str) -> str:
    """A model value shortened for the status bar: its file or folder name."""
    from loomterm.session_open import model_label

    return model_label(source)


def blind_group(node: Node | None) -> tuple[Node, object] | None:
    """The first node on ``node``'s path still marked blind, and its group id."""
    while node is not None:
        group = node.meta.get("blind")
        if group is not None:
            return node, group
        node = node.parent
    return None


class ModelActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`. See the module docstring."""

    # -- state (made on first use: the app's __init__ is not ours) -------------------
    @property
    def blind_mode(self: LoomApp) -> bool:
        return getattr(self, "_blind_mode", False)

    def model_legend(self: LoomApp) -> ModelLegend:
        """The legend line (the app composes it under the document)."""
        legend = getattr(self, "_model_legend", None)
        if legend is None:
            legend = self._model_legend = ModelLegend(id="model-legend")
        return legend

    def _revealed(self: LoomApp) -> set:
        if not hasattr(self, "_revealed_groups"):
            self._revealed_groups = set()
        return self._revealed_groups

    def on_mount(self: LoomApp) -> None:
        self.view.writer_colour = self.writer_colour
        self.branches.writer_colour = self.writer_colour
        self.theme_changed_signal.subscribe(self, lambda _theme: self.models_changed())
        self.models_changed()
        self.show_model_notes()

    def show_model_notes(self: LoomApp) -> None:
        """Say, one line each, which of the session's models did not come back when it
        was reopened, and why (their branches stay, recorded)."""
        for key, why in self.loom.model_notes.items():
            self.notify(
                f"Model {key} was not re-attached: {why}; its branches stay (recorded)",
                severity="warning",
                timeout=10,
            )

    # -- colours -----------------------------------------------------------------------
    def model_colours(self: LoomApp) -> dict[str, str]:
        """Model key to colour, for two or more models in the table (else empty)."""
        return getattr(self, "_model_colours", {})

    def writer_colour(self: LoomApp, node: Node) -> str | None:
        """The colour of the model that wrote ``node``; None for text no model wrote, a
        tree of one model, and (in blind mode) siblings not picked yet."""
        key = node.meta.get("model")
        if key is None:
            return None
        if self.blind_mode:
            group = node.meta.get("blind")
            if group is not None and group not in self._revealed():
                return None
        return self.model_colours().get(key)

    def models_changed(self: LoomApp) -> None:
        """The table, the active model, the theme or blindness changed: recolour."""
        table = self.loom.model_table
        variables = self.get_css_variables()
        colours = {}
        if len(table) > 1:
            for i, key in enumerate(table):
                colours[key] = variables.get(f"loom-model-{i % N_COLOURS + 1}", "#2aa198")
        self._model_colours = colours
        self._refresh_legend()
        self.view.redraw()
        self.branches.refresh()

    def _refresh_legend(self: LoomApp) -> None:
        loom = self.loom
        attached = loom.models
        colours = self.model_colours()
        entries = [
            (key, colours.get(key), key == loom.active_model, key in attached)
            for key in loom.model_table
        ]
        waiting = 0
        if self.blind_mode:
            revealed = self._revealed()
            nodes = list(loom.tree.nodes.values())
            waiting = sum(1 for n in nodes if "blind" in n.meta and n.meta["blind"] not in revealed)
        self.model_legend().show_models(entries, self.blind_mode, waiting)

    def on_loom_changed(self: LoomApp, message: LoomChanged) -> None:
        if message.event == "models":
            self.models_changed()
        elif message.event == "update" and message.node is not None:
            meta = message.node.meta
            if meta.get("rating"):  # rated good or bad (``actions.ratings``)
                self._picked(message.node, "rated")
            elif meta.get("bookmark"):
                self._picked(message.node, "bookmarked")
        elif message.event == "add" and self.blind_mode:
            self._refresh_legend()

    # -- switching and attaching -----------------------------------------------------
    def attached_models(self: LoomApp) -> list[str]:
        return list(self.loom.models)

    def action_next_model(self: LoomApp) -> None:
        """Make the next attached model the active one."""
        keys = self.attached_models()
        if len(keys) < 2:
            self.notify("One model only: attach another from the palette (Attach model)", timeout=3)
            return
        current = self.loom.active_model
        self.use_model(keys[(keys.index(current) + 1) % len(keys)])

    def use_model(self: LoomApp, key: str) -> None:
        loom = self.loom

        def job() -> None:
            loom.use(key)

        self.when_idle(lambda: self.submit("use model", job), stop=True)
        self.notify(f"Active model: {key}", timeout=2)

    def action_attach_model(self: LoomApp) -> None:
        def done(source: str | None) -> None:
            if source:
                self.attach_model(source)

        self.push_screen(AttachScreen(), done)

    def attach_model(self: LoomApp, source: str) -> None:
        """Load or connect to ``source`` on the engine worker and attach it; a model
        that cannot join is one line (the worker's error notice)."""
        loom = self.loom
        self.notify(f"Attaching {source}\u2026", timeout=3)

        def progress(stage: str, done: int, total: int | None) -> None:
            self.loading_progress(f"{source_label(source)}: {stage}", done, total)

        def job() -> None:
            # Hashing and converting a GGUF file takes a minute: the status bar shows it.
            key = loom.open_model(source, progress=progress)
            self.call_from_thread(self.notify, f"Attached {key}: alt+l switches to it", timeout=4)

        self.submit("attach model", job)

    # -- siblings from several models --------------------------------------------------
    def action_siblings(self: LoomApp) -> None:
        """ctrl+n: N siblings from the active model, or (several attached) the dialog."""
        keys = self.attached_models()
        if len(keys) < 2:
            self.action_generate_n()
            return
        last = dict(getattr(self, "_sibling_counts", []))
        n = max(1, self.loom.settings.n)
        counts = [(key, last.get(key, n if key == self.loom.active_model else 1)) for key in keys]

        def done(plan: list[tuple[str, int]] | None) -> None:
            if plan:
                self._sibling_counts = plan
                self.generate_from_models(plan)

        self.push_screen(SiblingsScreen(counts, self.blind_mode), done)

    def generate_from_models(self: LoomApp, plan: list[tuple[str, int]]) -> None:
        """Siblings from several models at the caret, in one generation. In blind mode
        each sibling is its own request, in a shuffled order, marked blind."""
        meta = None
        if self.blind_mode:
            singles = [(key, 1) for key, count in plan for _ in range(count)]
            random.shuffle(singles)
            plan = singles
            meta = {"blind": int(time.time() * 1000)}
        total = sum(count for _key, count in plan)
        self.when_idle(lambda: self._generate(total, models=plan, meta=meta), sync=False)

    # -- blind mode --------------------------------------------------------------------
    def action_toggle_blind(self: LoomApp) -> None:
        self._blind_mode = not self.blind_mode
        self.notify(
            "Blind mode on: siblings from several models hide who wrote them until you "
            "pick one (continue, type, bookmark or alt+p)"
            if self._blind_mode
            else "Blind mode off: every model's colour shows",
            timeout=4,
        )
        self.models_changed()

    def action_pick_branch(self: LoomApp) -> None:
        node = self._caret_node() or self.doc.node
        if not self._picked(node, "picked"):
            self.notify("No hidden siblings here to pick", timeout=2)

    def _picked(self: LoomApp, node: Node | None, how: str) -> bool:
        """The user picked the branch ``node`` is on: reveal its blind group."""
        found = blind_group(node)
        if found is None:
            return False
        first, group = found
        revealed = self._revealed()
        if group in revealed:
            return False
        revealed.add(group)
        siblings = [
            n
            for n in (first.parent.children if first.parent else [])
            if n.meta.get("blind") == group
        ]
        for sibling in siblings:
            self._set_meta(sibling, blind=None)
        if self.blind_mode:
            writer = first.meta.get("model", "?")
            self.notify(f"You {how} a branch by {writer}: models revealed", timeout=5)
        self.models_changed()
        return True

    def on_generation_started(self: LoomApp, message: GenerationStarted) -> None:
        self._picked(message.start, "continued")

    def on_synced(self: LoomApp, message: Synced) -> None:
        self._picked(message.node, "wrote after")

    def on_session_switched(self: LoomApp, message: SessionSwitched) -> None:
        # Another session (another loom) is open now: its models, its colours.
        self.call_after_refresh(self.models_changed)
        self.call_after_refresh(self.show_model_notes)
