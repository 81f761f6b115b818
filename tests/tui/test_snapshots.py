"""Snapshots of the main screens (pytest-textual-snapshot).

Deterministic by construction: the tiny seeded model, greedy sampling, a fixed terminal
size, no tok/s (``show_speed=False``), relative export paths and no notifications.
Update with ``pytest tests/tui/test_snapshots.py --snapshot-update`` after a deliberate
change, and look at the SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tui.conftest import TERMINAL, paste, settle


@pytest.fixture
def snap_app(make_app, loom):
    # The status bar names the runner's CPU threads, which it takes from torch when made
    # (whatever an earlier test left there): one, as the pictures were made with.
    loom.runner.threads = 1

    def make(**kwargs):
        kwargs.setdefault("export_dir", Path("exports"))
        return make_app(**kwargs)

    return make


async def _branches(pilot):
    await paste(pilot, "Once upon a time")
    await pilot.press("ctrl+n")
    await settle(pilot)
    await pilot.press("ctrl+home", *["right"] * 9)
    await pilot.press("ctrl+g")
    await settle(pilot)


def test_main_screen(snap_compare, snap_app):
    assert snap_compare(snap_app(), terminal_size=TERMINAL, run_before=_branches)


def test_main_screen_light_theme(snap_compare, snap_app):
    app = snap_app()

    async def run_before(pilot):
        app.set_theme("loom-light")
        await _branches(pilot)

    assert snap_compare(app, terminal_size=TERMINAL, run_before=run_before)


def test_probabilities_and_boundaries_high_contrast(snap_compare, snap_app):
    app = snap_app()

    async def run_before(pilot):
        app.set_theme("loom-high-contrast")
        await _branches(pilot)
        await pilot.press("f6", "f5")
        app.clear_notifications()  # their "on" notes: the shot is of the marks
        await pilot.pause()

    assert snap_compare(app, terminal_size=TERMINAL, run_before=run_before)


def test_alternatives_popup(snap_compare, snap_app, loom):
    async def run_before(pilot):
        await _branches(pilot)
        pilot.app.doc.move_to(len("Once upon"))  # the first generated token
        await pilot.press("ctrl+a")
        await settle(pilot)

    assert snap_compare(snap_app(), terminal_size=TERMINAL, run_before=run_before)


def test_main_screen_40x12(snap_compare, snap_app):
    """A small terminal: the status line drops parts instead of being cut, the footer
    shows whole keys only."""
    assert snap_compare(snap_app(), terminal_size=(40, 12), run_before=_branches)


async def _settings(pilot):
    """f2, then wait for the dialog and its fields (on a loaded machine one pause may
    not see them), and stop every caret's blink: a blink makes the picture depend on
    time."""
    from textual.widgets import Input

    await pilot.press("f2")
    for _ in range(200):
        fields = list(pilot.app.screen.query(Input))
        if fields:
            break
        await pilot.pause(0.02)
    assert fields, "the settings dialog did not open"
    for field in fields:
        field.cursor_blink = False
    await settle(pilot)
    await pilot.wait_for_scheduled_animations()


def test_settings_screen_40x12(snap_compare, snap_app):
    """A small terminal: each label above its field, the field the dialog's width."""

    assert snap_compare(snap_app(), terminal_size=(40, 12), run_before=_settings)


def test_settings_screen(snap_compare, snap_app):
    assert snap_compare(snap_app(), terminal_size=TERMINAL, run_before=_settings)


def test_export_dialog(snap_compare, snap_app):
    async def run_before(pilot):
        await pilot.press("ctrl+e")
        await pilot.pause()

    assert snap_compare(snap_app(), terminal_size=TERMINAL, run_before=run_before)


def test_help_screen(snap_compare, snap_app):
    async def run_before(pilot):
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(snap_app(), terminal_size=(120, 40), run_before=run_before)


def test_chat_with_roles(snap_compare, snap_app):
    app = snap_app()

    async def run_before(pilot):
        await app.run_action("new_chat")
        await pilot.pause()
        app.screen.query_one("#user").text = "Tell me about looms"
        await pilot.press("ctrl+s")
        await settle(pilot)

    assert snap_compare(app, terminal_size=TERMINAL, run_before=run_before)
