"""Chat turns through the model's own chat template, one node per turn.

The template is rendered for growing prefixes of the conversation and the differences
taken as the turns' text, so each turn becomes a node with ``meta["role"]`` and the
document can label it. Nothing here assumes a template format (ChatML, Llama, ...).
"""

from __future__ import annotations

from typing import Any

from loomterm.errors import InputError

# Stand-in turns used to find what a template puts between turns.
_PROBE_USER = "loomtermprobeuser"
_PROBE_ASSISTANT = "loomtermprobeassistant"

Turn = tuple[str | None, str]  # (role or None for glue text, text)


def has_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _render(tokenizer: Any, messages: list[dict[str, str]], prompt: bool) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)
    except Exception as exc:  # noqa: BLE001 - templates raise anything (jinja errors)
        raise InputError(f"the chat template refused these turns: {exc}") from None


def opening_turns(tokenizer: Any, system: str, user: str) -> list[Turn]:
    """The turns that start a chat: system (if given), user, then the assistant's
    header. Their texts join to the template's full prompt."""
    if not has_template(tokenizer):
        raise InputError("this model has no chat template: write the prompt as plain text")
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}
    ]
    full = _render(tokenizer, messages, prompt=True)
    turns: list[Turn] = []
    done = ""
    for count in range(1, len(messages) + 1):
        try:
            text = _render(tokenizer, messages[:count], prompt=False)
        except InputError:
            text = ""
        if not text.startswith(done) or not full.startswith(text):
            return [("user", full)]  # a template that does not render by prefix
        turns.append((messages[count - 1]["role"], text[len(done) :]))
        done = text
    if len(full) > len(done):
        turns.append(("assistant", full[len(done) :]))
    return [(role, text) for role, text in turns if text]


def next_turns(tokenizer: Any, document: str, user: str) -> list[Turn]:
    """The text to add after ``document`` (a chat whose last turn is the assistant's)
    for a new user turn and the assistant's header: first whatever closes the
    assistant's turn that the document lacks (an end-of-turn token the model did not
    write, or the newline after it)."""
    if not has_template(tokenizer):
        raise InputError("this model has no chat template: type the turn as plain text")
    probe = [
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": _PROBE_ASSISTANT},
    ]
    before = _render(tokenizer, probe, prompt=False)
    after = _render(tokenizer, probe + [{"role": "user", "content": user}], prompt=False)
    prompted = _render(tokenizer, probe + [{"role": "user", "content": user}], prompt=True)
    at = before.rfind(_PROBE_ASSISTANT)
    if at < 0 or not after.startswith(before) or not prompted.startswith(after):
        raise InputError("the chat template does not render turn by turn; type the turn instead")
    closing = before[at + len(_PROBE_ASSISTANT) :]
    have = next(k for k in range(len(closing), -1, -1) if document.endswith(closing[:k]))
    turns: list[Turn] = [
        (None, closing[have:]),
        ("user", after[len(before) :]),
        ("assistant", prompted[len(after) :]),
    ]
    return [(role, text) for role, text in turns if text]
