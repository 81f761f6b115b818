"""The local runner's decoders and their draft sources.

Each decoder takes one ``job.DecodeJob`` (the request, the node writer and the model it
needs) and returns one ``GenerateResult``: ``plain`` samples ``n`` continuations as one
batch; ``banned`` backtracks out of banned phrases; ``drafted`` verifies drafts from the
loom itself, which ``draft_tree``, ``draft_table`` and ``draft_sources`` propose.
"""
