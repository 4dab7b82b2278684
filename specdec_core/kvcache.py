"""A sequence's KV cache in buffers allocated ahead: appending writes in place, rolling back is a number.

Every decode step appends the new tokens' keys and values to every layer's cache, and speculative
decoding then throws some of them away again (rejected drafts, a tree's other branches). transformers'
`DynamicCache` keeps each layer as one tensor of exactly the cached length and appends with `torch.cat`,
so every step allocates and copies the whole cache (30 layers × keys and values), and a rollback is a
`crop` that slices it again.

Here each layer owns a buffer (B, kv_heads, capacity, hd) and a length. Appending copies only the new
positions in; attention reads the prefix view [:, :, :length] (a strided view of the buffer, no copy:
SDPA returns the same bits for it as for a contiguous copy, `tests/test_kvcache.py`); rolling back lowers
the length. A buffer that runs out doubles (one copy of what it holds), so a long answer costs
O(log length) copies instead of one per step. What lies past a layer's length is stale and never read.

The memory it reports is what it holds: the buffers' capacity, not just the cached length.
"""
from __future__ import annotations

import torch

CAPACITY = 256  # positions a buffer starts with: a chat prompt and its answer fit without a doubling


class KVCache:
    """Keys and values of one sequence (or B sequences of one length) for every layer it has seen.

    Layers are created by their first `update`, with that call's batch, heads, head size, dtype and device,
    so one class serves the target and any drafter (a truncated early-exit copy has fewer layers)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self.keys: list[torch.Tensor] = []  # per layer (B, kv_heads, capacity, hd)
        self.values: list[torch.Tensor] = []
        self.lengths: list[int] = []  # per layer: positions 0 .. length-1 are cached

    def get_seq_length(self) -> int:
        """Cached positions (layer 0's; every layer has the same between forwards)."""
        return self.lengths[0] if self.lengths else 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v (B, kv_heads, n, hd) to `layer`; return its keys and values so far, (B, kv_heads, length, hd)
        views of the buffers."""
        if layer == len(self.keys):
            self.keys.append(k.new_empty(*k.shape[:2], self.capacity, k.shape[3]))
            self.values.append(v.new_empty(*v.shape[:2], self.capacity, v.shape[3]))
            self.lengths.append(0)
        start, end = self.lengths[layer], self.lengths[layer] + k.shape[2]
        if end > self.keys[layer].shape[2]:
            self._grow(layer, end)
        keys, values = self.keys[layer], self.values[layer]
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        self.lengths[layer] = end
        return keys[:, :, :end], values[:, :, :end]

    def _grow(self, layer: int, needed: int) -> None:
        """Double the layer's buffers until `needed` positions fit, keeping the cached ones."""
        capacity = self.keys[layer].shape[2]
        while capacity < needed:
            capacity *= 2
        length = self.lengths[layer]
        for store in (self.keys, self.values):
            old = store[layer]
            grown = old.new_empty(*old.shape[:2], capacity, old.shape[3])
            grown[:, :, :length] = old[:, :, :length]
            store[layer] = grown

    def view(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's cached keys and values, (B, kv_heads, length, hd) views."""
        end = self.lengths[layer]
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def crop(self, n: int) -> None:
        """Keep the first n positions; a negative n forgets the last -n (DynamicCache's convention)."""
        for layer, length in enumerate(self.lengths):
            self.lengths[layer] = min(n, length) if n >= 0 else max(length + n, 0)

    @torch.inference_mode()
    def keep(self, new: int, rows: list[int]) -> None:
        """After a forward of `new` positions, keep only `rows` of them (ascending: a tree's accepted root
        path), moved up in order to follow the older positions; the others are forgotten. A chain's
        accepted prefix (rows 0 .. m-1) moves nothing: it is a rollback."""
        start = self.get_seq_length() - new
        if rows != list(range(len(rows))):
            index = torch.tensor(rows, device=self.keys[0].device) + start
            for store in (self.keys, self.values):
                for buffer in store:  # the index copies first, so the overlapping write is safe
                    buffer[:, :, start:start + len(rows)] = buffer[:, :, index]
        self.crop(start + len(rows))

    def nbytes(self) -> int:
        """Bytes the buffers hold (their capacity: what the cache costs in memory, not just what it caches)."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))
