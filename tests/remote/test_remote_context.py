"""Memory, author's note and world info over a real llama-server: the server is sent
exactly ``loom.context_tokens`` and its prefix cache keeps the memory."""

from __future__ import annotations

import pytest

from loomterm.engine import Loom
from tests.remote.test_remote_ops import PROMPT, assert_matches, direct


@pytest.fixture
def loom(llama_server) -> Loom:
    return Loom.load(llama_server.url)


def test_generation_sends_the_assembled_context(loom, llama_server):
    loom.update_settings(
        memory="A story of looms.",
        authors_note="[Style: plain]",
        authors_note_depth=1,
        world_info={"entries": [{"keys": ["weaving"], "text": "Weaving is old."}]},
    )
    node = loom.append(loom.root, PROMPT + "\nIt starts with thread")
    seen = loom.context_tokens(node)
    layout = loom.context_layout(node)
    assert [kind for kind, _, _ in layout.injected()] == ["memory", "world_info", "authors_note"]
    [kid] = loom.generate(node, 8, temperature=0)
    decode = loom.runner.exchanges[-1]
    assert decode.what == "decode" and decode.prompt_tokens == len(seen)
    assert_matches(kid, direct(llama_server.url, seen, 8))
    assert loom.context_version(kid) == loom.context_spec().version
    # A sibling branch: the server's cache keeps the memory and the shared text.
    other = loom.append(node, " and a needle")
    [kid2] = loom.generate(other, 4, temperature=0)
    again = loom.runner.exchanges[-1]
    assert again.prompt_tokens == len(loom.context_tokens(other))
    assert again.cached is not None and again.cached >= layout.kept
    assert_matches(kid2, direct(llama_server.url, loom.context_tokens(other), 4))
