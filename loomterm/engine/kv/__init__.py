"""KV storage and what acts on it without a model: the working cache (``cache``, with
its layer view ``layer`` and its column layout ``layout``), per-node KV (``node_kv``),
re-rotation to new positions (``rope``), the context window (``window``), what resident
KV weighs (``resident``) and what tidying does to it (``tidy``).
"""
