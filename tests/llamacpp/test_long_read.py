"""A long read on llama.cpp says how far it got and stops on escape (issue 32: the
Loom's ``progress`` and ``interrupt`` never reached the llama.cpp context, so a read of
thousands of tokens said nothing, and neither escape nor quit could stop it): it goes
in chunks of ``READ_CHUNK`` tokens, and after a stop the next read takes up from what
was read, to the same logits as a fresh read of the whole text."""

from __future__ import annotations

import threading

import pytest
import torch

from loomterm.engine.llamacpp.context import READ_CHUNK
from loomterm.errors import PrefillCancelled
from tests.llamacpp.conftest import THREADS

pytestmark = pytest.mark.default_model

TEXT = (
    "The old lighthouse keeper climbed the stairs every evening, counting the steps "
    "aloud as his father had done, and at the top he wound the clockwork that turned "
    "the great lens. "
)


def _loom(default_gguf):
    from loomterm.engine import Loom

    return Loom.load(model=str(default_gguf), backend="llama.cpp", n_ctx=4096, threads=THREADS)


def test_a_long_read_reports_progress_and_stops_between_chunks(binding, default_gguf):
    loom = _loom(default_gguf)
    stop = threading.Event()
    reports: list[tuple[str, int, int | None]] = []

    def progress(stage: str, done: int, n: int | None) -> None:
        reports.append((stage, done, n))
        if len(reports) == 1:
            stop.set()  # escape, heard after the first chunk

    loom.progress = progress
    loom.interrupt = stop
    with pytest.raises(PrefillCancelled) as stopped:
        loom.append(loom.root, TEXT * 40)
    node = stopped.value.node  # the append is in the tree, whole
    assert node is not None and loom.text(node) == TEXT * 40
    total = node.end
    assert total > 2 * READ_CHUNK
    assert reports == [("prefill", READ_CHUNK, total)]  # one chunk read, then stopped

    stop.clear()
    after_stop = loom.next_logits(node)
    rest = total - READ_CHUNK  # the read takes up where it stopped
    assert reports[1:] and reports[-1] == ("prefill", rest, rest), reports
    fresh = _loom(default_gguf)
    whole = fresh.next_logits(fresh.append(fresh.root, TEXT * 40))
    assert torch.equal(after_stop.argmax(), whole.argmax())
    kl = torch.nn.functional.kl_div(
        torch.log_softmax(after_stop, -1),
        torch.log_softmax(whole, -1),
        log_target=True,
        reduction="sum",
    )
    assert float(kl) < 0.02, float(kl)
