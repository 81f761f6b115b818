"""``loomterm bench``: how fast branching, editing and decoding are, as ratios.

Every figure is measured twice in the same run, on the same model, device and text: once
the way loomterm does it and once by a baseline (a full recompute, transformers'
``generate``, sequential runs, the ideal memory, no re-rotation). Absolute times vary
between machines; the ratios are what to track.

- ``corpus.txt``: the fixed bench text, original prose written for this purpose.
- ``report``: rows, the aligned table, JSON.
- ``timing``: clocks that wait for the device, and medians.
- ``common``: fresh looms, transformers' stock attention, full recomputes.
- ``edits``: edit latency and re-rope quality.
- ``decode.plain``: plain decode, batched siblings, KV memory and drafted decoding.
- ``weave``: a weave's batched levels against one request per node.
- ``longdoc``: opening a long session, branch switches past the context window.
- ``tree_map``: the tree map's cost per key on a 21,845-node tree against a small one.
- ``runner``: the plan (``--quick`` or full) and the run.
"""

from __future__ import annotations

from importlib import resources


def corpus_text() -> str:
    """The bench corpus, shipped inside the package."""
    return resources.files(__name__).joinpath("corpus.txt").read_text(encoding="utf-8")
