"""The status bar says which text is what: the sampler preset is labelled as a preset
(llama.cpp's preset is not the llama.cpp backend), the backend is named, the speed is
shown once; and notifications stand above the status bar, never over it (issue 32)."""

from __future__ import annotations

from loomterm.config.settings import Settings
from loomterm.tui.widgets.status_bar import StatusInfo, status_layouts
from tests.tui.conftest import TERMINAL, settle


async def test_preset_and_backend_are_labelled(make_app, loom):
    from loomterm.sessions.defaults import start_new_session

    start_new_session(loom)  # llama.cpp's samplers: the preset named "llama.cpp"
    app = make_app()
    async with app.run_test(size=(200, 30)) as pilot:
        await settle(pilot)
        text = app.status.full_text
        assert "preset: llama.cpp" in text
        assert "cpu \u00b7 torch" in text  # the backend, beside the device
        assert text.count("llama.cpp") == 1  # only the preset says llama.cpp here


def test_speed_shown_once_while_generating():
    info = StatusInfo(
        model="m",
        device="cpu",
        backend="torch",
        tokens_per_second=14.2,
        settings=Settings(),
        state="generating \u00b7 14.2 tok/s \u00b7 esc stops",
    )
    for layout in status_layouts(info):
        assert layout.plain.count("tok/s") == 1, layout.plain


def test_backend_named_once_where_the_runner_names_it():
    info = StatusInfo(model="m", device="cpu \u00b7 llama.cpp (2 threads)", backend="llama.cpp")
    assert status_layouts(info)[0].plain.count("llama.cpp") == 1


async def test_toasts_stand_clear_of_the_status_bar(make_app):
    app = make_app()
    async with app.run_test(size=TERMINAL, notifications=True) as pilot:
        await settle(pilot)
        for i in range(3):
            app.notify(f"note {i}", timeout=30)
        await pilot.pause(0.3)
        toasts = list(app.screen.query("Toast"))
        assert toasts
        bar = app.status.region
        for toast in toasts:
            assert not toast.region.overlaps(bar), (toast.region, bar)
            assert toast.region.bottom <= bar.y
