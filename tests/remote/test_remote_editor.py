"""The editor on a server: it generates, makes siblings, and when the server is killed
mid-generation it says so in one line, keeps what came, and stays usable."""

from __future__ import annotations

import pytest

from loomterm.engine import Loom
from loomterm.tree import Origin
from tests.tui.conftest import TERMINAL, settle, write_and_generate


def make_app(loom: Loom, tmp_path):
    from loomterm.tui.app import LoomApp

    return LoomApp(
        loom, show_speed=False, sync_delay=0.05, export_dir=tmp_path, session_name="served"
    )


def errors_of(app) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "error"]  # noqa: SLF001


@pytest.fixture
def served(llama_server) -> Loom:
    loom = Loom.load(llama_server.url)
    loom.update_settings(temperature=0.0, max_new_tokens=8, n=3)
    return loom


async def test_the_editor_generates_and_branches_on_a_server(served, tmp_path):
    app = make_app(served, tmp_path)
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "Once upon a time", timeout=90)
        node = served.cursor
        assert node.origin is Origin.MODEL and len(node.tokens) == 8
        assert app.doc.text == served.text(node)
        await pilot.press("ctrl+n")  # N continuations at the caret: one request, 3 rows
        await settle(pilot, timeout=60)
        assert len(node.children) == 3 and served.cursor in node.children
        assert all(len(kid.tokens) == 8 for kid in node.children)
        assert not errors_of(app)


async def test_a_server_killed_mid_generation_is_one_line_and_the_tokens_stay(own_server, tmp_path):
    server = own_server()
    loom = Loom.load(server.url)
    loom.update_settings(temperature=0.0, max_new_tokens=200, n=3)

    def kill_at_three(_event, node):
        if node is not None and node.origin is Origin.MODEL and len(node.tokens) == 3:
            server.kill()

    app = make_app(loom, tmp_path)
    async with app.run_test(size=TERMINAL) as pilot:
        loom.subscribe(kill_at_three)
        await write_and_generate(pilot, "Once upon a time", timeout=90)
        await settle(pilot, timeout=60)
        [message] = errors_of(app)
        assert message.startswith(f"the server at {server.url} cut the stream after ")
        kid = loom.cursor if loom.cursor.origin is Origin.MODEL else loom.cursor.children[-1]
        assert len(kid.tokens) >= 3
        assert loom.text(kid) in app.doc.text or app.doc.text in loom.text(kid)
        await pilot.press("end", "space", "x")  # still an editor
        await settle(pilot)
        assert app.doc.text.endswith(" x")
