"""Run in a fresh interpreter by the resume tests: open a session and report.

Usage: python -m tests.resume_child SESSION OUT.pt [--model M] [--read-only] [--greedy N]
       [--no-snapshot]

Writes a torch file with the next-token logits at the cursor, the greedy continuation,
how many tokens the model had to process to get those logits, and the warnings raised.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

from loomterm.sessions.session import close_session, open_loom
from tests.helpers import ForwardCounter


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("session")
    parser.add_argument("out")
    parser.add_argument("--model")
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("--greedy", type=int, default=16)
    parser.add_argument("--no-snapshot", action="store_true")
    args = parser.parse_args()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        loom = open_loom(
            args.session,
            model=args.model,
            device="cpu",
            dtype="float32",
            read_only=args.read_only,
            kv_snapshot=False if args.no_snapshot else None,
        )
        opened = time.perf_counter() - start
        with ForwardCounter(loom) as counter:
            logits = loom.next_logits(loom.cursor)
            first_logits = time.perf_counter() - start
            prefill_tokens = counter.tokens
        greedy = loom.generate(loom.cursor, args.greedy, n=1, temperature=0.0)[0].tokens
        close_session(loom)
    torch.save(
        {
            "logits": logits,
            "greedy": greedy,
            "prefill_tokens": prefill_tokens,
            "path_tokens": loom.cursor.end,
            "cursor": loom.cursor.id,
            "warnings": [str(w.message) for w in caught],
            "open_s": opened,
            "first_logits_s": first_logits,
            "approx": [n.id for n in loom.tree.nodes.values() if n.approx],
        },
        args.out,
    )


if __name__ == "__main__":
    main()
