"""Bare ``loomterm``: load the model and print a greedy completion.

A stand-in until the editor exists: it proves the whole path (fetch, convert, load,
prefill, decode, stream) works on this machine.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_USER_MESSAGE = "Write one sentence about looms."
# For base models without a chat template.
DEFAULT_PLAIN_PROMPT = "A loom is a machine that"


def run(args: argparse.Namespace) -> int:
    """Load ``args.model``, generate greedily from the prompt, stream the text to stdout."""
    from loomterm.engine.models import end_progress_line, load_model, print_progress

    try:
        loaded = load_model(
            args.model, device=args.device, dtype=args.dtype, progress=print_progress
        )
    finally:
        end_progress_line()  # a failed stage leaves its line open before the error

    from loomterm.engine import Loom

    loom = Loom.from_loaded(loaded, n_ctx=args.n_ctx)
    prompt = args.prompt if args.prompt is not None else default_prompt(loaded.tokenizer)
    node = loom.append(loom.root, prompt)
    print(
        f"[{loaded.name} on {loaded.device}, {str(loaded.dtype).removeprefix('torch.')}]",
        file=sys.stderr,
    )
    if args.prompt is not None:
        print(prompt, end="", flush=True)

    def show(_node, token_id: int, piece: str) -> None:
        if token_id not in loom.eos_ids:  # the end-of-turn marker is not text
            print(piece, end="", flush=True)

    loom.generate(node, args.max_new_tokens, temperature=0, on_token=show)
    print()
    return 0


def default_prompt(tokenizer) -> str:
    """A short chat turn through the model's own template, or plain text without one."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": DEFAULT_USER_MESSAGE}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return DEFAULT_PLAIN_PROMPT
