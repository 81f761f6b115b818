"""The local runner: a transformers model in this process, with the KV on the nodes.

``runner`` (:class:`LocalRunner`) owns the model and the forward pass; ``local.path_cache``
keeps the working cache in step with the tree; ``local.context_kv`` holds the KV of an injected
context; ``budget`` caps resident KV with least-recently-used eviction.
"""
