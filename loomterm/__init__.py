"""loomterm: a terminal loom for language-model output, on a tree of cached KV branches."""

__version__ = "0.1.0"
