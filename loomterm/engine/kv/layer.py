"""One model layer's view of the working cache's buffer, as transformers' ``Cache``
interface wants a layer: it holds nothing itself, and writes land at the cache's cursor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers.cache_utils import CacheLayerMixin

if TYPE_CHECKING:
    from loomterm.engine.kv.cache import WorkingCache


class BufferLayer(CacheLayerMixin):
    """One model layer's view of the shared buffer; writes land at the cache's cursor."""

    is_compileable = False
    is_croppable = True
    is_sliding = False

    def __init__(self, owner: WorkingCache, index: int) -> None:
        super().__init__()
        self.owner = owner
        self.index = index
        self.is_initialized = True

    @property
    def keys(self) -> torch.Tensor:  # (B, H, T, D)
        return self.owner.buf[self.index, 0, : self.owner.batch, :, : self.owner.length]

    @keys.setter
    def keys(self, value) -> None:  # the base class assigns None at construction
        pass

    @property
    def values(self) -> torch.Tensor:  # (B, H, T, D)
        return self.owner.buf[self.index, 1, : self.owner.batch, :, : self.owner.length]

    @values.setter
    def values(self, value) -> None:
        pass

    def lazy_initialization(self, key_states, value_states) -> None:  # buffer is preallocated
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        return self.owner.write(self.index, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.owner.length

    def get_max_length(self) -> int:
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the working cache is cropped through WorkingCache.truncate")
