"""Token healing in the editor: a generation after a typed partial word streams the
healed word, keeps the typed text, and the alternatives of a healed token say so."""

from __future__ import annotations

import pytest

from loomterm.engine.loom.healing import MAX_TOKENS, plan_heal, typed_tail
from loomterm.engine.text_prefix import prefix_index
from loomterm.tui.widgets.alternatives import AlternativesScreen
from tests.tui.conftest import TERMINAL, settle, write_and_generate
from tests.tui.screen_text import screen_text


@pytest.fixture
def loom(loom):
    """The shared fixture's loom with token healing on again (the default; the shared
    fixture turns it off for the tests that count nodes)."""
    loom.update_settings(token_healing="on")
    return loom


TYPED = "Once upon a time, in a land far away, there lived a wea"


def test_the_tiny_tokenizer_heals_this_prompt(loom):
    node = loom.append(loom.root, TYPED)
    tail = [loom.codec.token_bytes(t) for t in typed_tail(node, MAX_TOKENS)]
    assert plan_heal(tail, prefix_index(loom.codec, loom.runner.vocab_size), 8) is not None


async def test_a_healed_generation_keeps_the_typed_text_and_marks_its_tokens(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, TYPED)
        kid = loom.cursor
        assert kid.meta.get("healed") and TYPED.endswith(kid.meta["healed"])
        assert app.doc.text == loom.text(kid) and app.doc.text.startswith(TYPED)
        head = kid.parent
        assert any(loom.text(other) == TYPED for other in head.children)  # the old spelling
        app.doc.move_to(len(loom.text(head)))  # the caret on the first healed token
        await pilot.press("ctrl+a")
        await settle(pilot)
        assert isinstance(app.screen, AlternativesScreen)
        text = screen_text(app)
        assert "healed: spells the typed" in text, text


async def test_regenerating_a_healed_branch_heals_the_same_typed_word(make_app, loom):
    loom.update_settings(temperature=1.0)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, TYPED)
        first = loom.cursor
        await app.run_action("regenerate")
        await settle(pilot)
        second = loom.cursor
        assert second is not first and second.parent is first.parent
        assert second.meta.get("healed") == first.meta["healed"]
        assert app.doc.text.startswith(TYPED)
