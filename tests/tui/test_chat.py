"""Chat sessions through the tokenizer's chat template, with role turns."""

from __future__ import annotations

from loomterm.tree import Origin
from loomterm.tui import chat
from loomterm.tui.widgets.dialogs import ChatScreen, TurnScreen
from tests.tui.conftest import TERMINAL, settle
from tests.tui.screen_text import screen_text


def test_opening_turns_join_to_the_template_prompt(loom):
    tokenizer = loom.runner.tokenizer
    turns = chat.opening_turns(tokenizer, "Be brief.", "Hello there")
    assert [role for role, _ in turns] == ["system", "user", "assistant"]
    full = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "".join(text for _, text in turns) == full


def test_next_turns_close_the_assistant_turn_first(loom):
    tokenizer = loom.runner.tokenizer
    document = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello"
    turns = chat.next_turns(tokenizer, document, "and you?")
    assert turns == [
        (None, "<|im_end|>\n"),
        ("user", "<|im_start|>user\nand you?<|im_end|>\n"),
        ("assistant", "<|im_start|>assistant\n"),
    ]
    # The model already wrote its end-of-turn token: only the newline is missing.
    turns = chat.next_turns(tokenizer, document + "<|im_end|>", "ok")
    assert turns[0] == (None, "\n")


async def _start_chat(pilot, app, system="Be brief.", user="Hello there"):
    await app.run_action("new_chat")
    await pilot.pause()
    assert isinstance(app.screen, ChatScreen)
    app.screen.query_one("#system").text = system
    app.screen.query_one("#user").text = user
    await pilot.press("ctrl+s")
    await settle(pilot)


async def test_new_chat_makes_role_turns_and_generates_the_answer(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await _start_chat(pilot, app)
        answer = loom.cursor
        assert answer.origin is Origin.MODEL
        roles = [node.meta.get("role") for node in answer.path()[1:-1]]
        assert roles == ["system", "user", "assistant"]
        text = screen_text(app)
        for label in ("system ", "user ", "assistant "):
            assert label in text  # the role gutter
        assert "Hello there" in text


async def test_adding_a_user_turn(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await _start_chat(pilot, app)
        await pilot.press("alt+t")
        await pilot.pause()
        assert isinstance(app.screen, TurnScreen)
        app.screen.query_one("TextArea").text = "Tell me more"
        await pilot.press("ctrl+s")
        await settle(pilot)
        node = loom.cursor
        assert node.origin is Origin.MODEL
        header = node.parent
        assert header.meta.get("role") == "assistant"
        user_turn = header.parent
        assert user_turn.meta.get("role") == "user"
        assert "Tell me more" in loom.text(user_turn)
        # Two user turns, their markers in the tokens and not in the text.
        assert loom.codec.written(loom.tokens(node)).count("<|im_start|>user") == 2
        assert "<|im_start|>" not in loom.text(node) and app.doc.text == loom.text(node)


async def test_a_new_chat_in_a_used_session_starts_a_new_session(make_app, loom, tmp_path):
    from loomterm.sessions.session import close_session, save_loom, session_of

    loom.append(loom.root, "An old story")
    save_loom(loom, tmp_path / "old.loom")
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await app.run_action("new_chat")
        await pilot.pause()
        await pilot.press("y")  # yes, in a new session
        await pilot.pause()
        app.screen.query_one("#name").value = "fresh"
        app.screen.query_one("#user").text = "Hi"
        await pilot.press("ctrl+s")
        await settle(pilot)
        new = app.loom
        assert new is not loom
        assert app.session_name == "fresh"
        assert session_of(new) is not None and session_of(new).path.name == "fresh.loom"
        assert session_of(loom).closed  # the old session was saved and released
        assert "An old story" not in app.doc.text
        close_session(new)
