"""KV storage and what acts on it without a model: per-node segments and the working
cache (``cache``), re-rotation to new positions (``rope``), the context window
(``window``), what resident KV weighs (``resident``) and what tidying does to it (``tidy``).
"""
