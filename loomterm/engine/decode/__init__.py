"""The local runner's decoders and their draft sources.

``plain`` samples ``n`` continuations as one batch; ``banned`` backtracks out of banned
phrases; ``drafted`` verifies drafts from the loom itself, which ``draft_tree``,
``decode.draft_table`` and ``decode.draft_sources`` propose.
"""
