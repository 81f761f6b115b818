"""Undo of an edit goes back to the branch as it was, and makes no branch of its own.

The report: text the model wrote read "... in the sand, ...". The writer deleted "sand"
with backspace, typed "snow", and once the edit had synced pressed ctrl+z. The
document then read "in the ," (the text between the delete and the typing) and that
half-made text became a new branch. Undo is navigation: it goes back to the model's
branch as it was, redo comes back to the edit, and no node ever holds the half-made
text (in the tree or in the session file).
"""

from __future__ import annotations

from loomterm.sessions.session import close_session, load_session, save_loom
from loomterm.tree import Origin
from tests.tui.conftest import TERMINAL, settle, type_text

PROMPT = "The children played"
MODEL = " on the beach, in the sand, until dark."
OTHER = " at home all day."
EDITED = PROMPT + MODEL.replace("sand", "snow")
HALF = PROMPT + MODEL.replace("sand", "")
DELAY = 1.0  # seconds before typing syncs: the keys of one edit come faster


def path_texts(loom, tree) -> set[str]:
    """The text of every node's path in ``tree``."""
    return {loom.decode(node.path_tokens()) for node in tree.nodes.values()}


async def test_undo_of_an_edit_in_model_text_goes_back_to_the_model_branch(
    make_app, loom, tmp_path
):
    path = tmp_path / "story.loom"
    prompt = loom.append(loom.root, PROMPT)
    written = loom.append(prompt, MODEL, origin=Origin.MODEL)
    other = loom.append(prompt, OTHER, origin=Origin.MODEL)
    loom.cursor = other
    save_loom(loom, path)
    app = make_app(sync_delay=DELAY)
    try:
        async with app.run_test(size=TERMINAL) as pilot:
            await settle(pilot)
            await pilot.press("alt+left")  # to the sibling the model wrote "sand" in
            await settle(pilot)
            assert app.doc.text == PROMPT + MODEL
            after_sand = len(PROMPT + " on the beach, in the sand")
            await pilot.press("ctrl+home", *["right"] * after_sand)
            await pilot.press(*["backspace"] * len("sand"))
            await type_text(pilot, "snow")
            await settle(pilot)  # the typing paused: the edit is in the tree
            assert app.doc.text == EDITED
            edit = loom.cursor
            assert loom.text(edit) == EDITED
            count = len(loom.tree.nodes)

            await pilot.press("ctrl+z")
            await settle(pilot)
            assert app.doc.text == PROMPT + MODEL, "undo did not go back to the model's text"
            assert loom.cursor is written
            assert HALF not in path_texts(loom, loom.tree), "undo made a branch of half-made text"
            await pilot.press("ctrl+z")  # further back: the sibling shown before
            await settle(pilot)
            assert app.doc.text == PROMPT + OTHER and loom.cursor is other
            await pilot.press("ctrl+y")
            await settle(pilot)
            assert app.doc.text == PROMPT + MODEL
            await pilot.press("ctrl+y")
            await settle(pilot)
            assert app.doc.text == EDITED, "redo did not bring the edit back"
            assert loom.cursor is edit
            assert len(loom.tree.nodes) == count  # undo and redo made no node
            assert loom.text(written) == PROMPT + MODEL  # the model's branch is still there
    finally:
        close_session(loom)
    stored = path_texts(loom, load_session(path).tree)
    assert HALF not in stored
    assert {PROMPT + MODEL, PROMPT + OTHER, EDITED} <= stored


async def test_undo_before_the_edit_synced_goes_back_to_the_model_branch(make_app, loom):
    """ctrl+z at once after the keys (the engine has not had the edit yet): the edit
    goes to the engine first, then the undo goes back to the model's branch."""
    prompt = loom.append(loom.root, PROMPT)
    written = loom.append(prompt, MODEL, origin=Origin.MODEL)
    loom.cursor = written
    app = make_app(sync_delay=5.0)  # no pause syncs it: only the undo does
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+home", *["right"] * len(PROMPT + " on the beach, in the sand"))
        await pilot.press(*["backspace"] * len("sand"))
        await type_text(pilot, "snow")
        await pilot.press("ctrl+z")
        await settle(pilot)
        assert app.doc.text == PROMPT + MODEL and loom.cursor is written
        assert EDITED in path_texts(loom, loom.tree)  # the edit is kept beside it
        await pilot.press("ctrl+y")
        await settle(pilot)
        assert app.doc.text == EDITED
        assert HALF not in path_texts(loom, loom.tree)


async def test_undo_of_typing_steps_back_a_word_at_a_time_without_new_branches(
    make_app, loom, tmp_path
):
    """The writer's own typing: each undo takes a word back, redo puts them back; the
    tree gets no node whose text the writer never had (splits of the typed node only)."""
    typed = "Hello world again "
    app = make_app(sync_delay=DELAY)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await type_text(pilot, typed)
        await settle(pilot)
        assert loom.text(loom.cursor) == typed
        seen = []
        for _ in range(3):
            await pilot.press("ctrl+z")
            await settle(pilot)
            seen.append(app.doc.text)
        assert seen == ["Hello world ", "Hello ", ""]
        for _ in range(3):
            await pilot.press("ctrl+y")
            await settle(pilot)
            seen.append(app.doc.text)
        assert seen[3:] == ["Hello ", "Hello world ", typed]
        leaves = [node for node in loom.tree.nodes.values() if not node.children]
        texts = [loom.text(node) for node in leaves]
        assert len(texts) == len(set(texts)), f"two branches read the same: {texts}"
        assert set(texts) <= {"Hello ", "Hello world ", typed}, texts
        assert len(loom.root.children) == 1, "undo made a sibling of the typed text"


def test_undo_of_a_model_word_replaced_through_a_real_terminal(tmux_run, tiny_llama_dir, loom):
    """The report's keys through tmux to the installed command: backspace over the
    model's "sand", type "snow", pause, ctrl+z shows "sand" again, ctrl+y "snow"; the
    session file holds no half-made text."""
    import time

    from loomterm.sessions.session import session_path
    from tests.tui.test_tmux import document_lines, idle

    prompt = loom.append(loom.root, PROMPT)
    loom.cursor = loom.append(prompt, MODEL, origin=Origin.MODEL)
    save_loom(loom, session_path("sand"))
    close_session(loom)
    term = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "sand"])

    def shows(word: str, gone: str):
        def check(screen: str) -> bool:
            text = " ".join(document_lines(screen))
            return f"the {word}," in text and gone not in text and idle(screen)

        return check

    term.wait_for(shows("sand", "snow"), what="the session to open")
    term.keys("C-Home", *["Right"] * len(PROMPT + " on the beach, in the sand"))
    # Key by key at a writer's pace (a burst reaches the editor as one edit), each
    # well inside the sync delay (0.4 s): the edit goes to the engine once.
    for key in ["BSpace"] * len("sand") + list("snow"):
        term.keys(key, literal=key != "BSpace")
        time.sleep(0.1)
    time.sleep(1.0)  # past the sync delay (0.4 s)
    term.wait_for(shows("snow", "sand"), what="the edit to sync")
    term.keys("C-z")
    term.wait_for(shows("sand", "snow"), what="the undo")
    term.keys("C-y")
    term.wait_for(shows("snow", "sand"), what="the redo")
    term.keys("C-q")
    assert term.exit_status() == "0"
    stored = path_texts(loom, load_session(session_path("sand")).tree)
    assert HALF not in stored
    assert {PROMPT + MODEL, EDITED} <= stored
