"""The editor on a model whose tokenizer adds ``<bos>`` (a tiny seeded Llama on a
SentencePiece-like tokenizer with byte fallback, built in the test): the document
holds only the typed characters, ctrl+g after typing generates after the last typed
character, and an edit at the start lands at char 0 with ``<bos>`` kept first, once."""

from __future__ import annotations

import pytest

from loomterm.tui import ops
from tests.engine.test_bos_tokenizers import build_bos_llama
from tests.helpers import make_loom
from tests.tui.conftest import TERMINAL, settle, type_text
from tests.tui.screen_text import screen_text


@pytest.fixture(scope="module")
def bos_dir(tmp_path_factory):
    return build_bos_llama(tmp_path_factory.mktemp("bos-editor"), "sentencepiece")


async def test_typing_ctrl_g_and_an_edit_at_the_start_hold_the_writers_text(
    make_app, bos_dir, tmp_path
):
    loom = make_loom(bos_dir, n_ctx=512)
    loom.update_settings(temperature=0.0, max_new_tokens=8, n=1)
    bos = loom.runner.tokenizer.bos_token_id
    app = make_app(loom)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "Once upon a time")
        await settle(pilot)
        assert app.doc.text == loom.text(loom.cursor) == "Once upon a time"
        assert loom.cursor.path_tokens()[0] == bos
        assert "<bos>" not in screen_text(app)

        await pilot.press("ctrl+g")
        await settle(pilot)
        generated = loom.cursor
        # Nothing typed moved: token healing (on by default) backed up the typed "e"
        # only (this tokenizer merges "Once upon a tim"), and the model spelled it again.
        healed = generated.meta.get("healed", "")
        assert loom.text(generated.parent) + healed == "Once upon a time"
        assert app.doc.text == loom.text(generated)
        assert app.doc.text.startswith("Once upon a time")

        await pilot.press("ctrl+home")
        await type_text(pilot, "Long ago. ")
        await settle(pilot)
        assert app.doc.text == loom.text(loom.cursor) == "Long ago. " + loom.text(generated)
        tokens = loom.cursor.path_tokens()
        assert tokens[0] == bos and tokens.count(bos) == 1
        written = ops.export_session(loom, str(tmp_path / "story.txt"), "txt")
        assert open(written, encoding="utf-8").read().rstrip("\n") == app.doc.text
