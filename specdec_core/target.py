"""The target model behind a tiny API: prefill, forward new tokens on a KV cache, roll the cache back.

Every decoding mode uses only these three calls, so "one target forward" means the same thing in
AR, Jacobi and speculative decoding. The forward itself is `llama.forward` (the model written out).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from . import llama
from .kvcache import KVCache
from .models import LoadedModel


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so wall-clock timings measure the work and not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def timed(device: torch.device, into: list[float]):
    """Append the elapsed seconds of the block to `into` (synchronising CUDA on both ends)."""
    synchronize(device)
    start = time.perf_counter()
    yield
    synchronize(device)
    into.append(time.perf_counter() - start)


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # (n, V) float32, row i predicts the token after input i
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (n, H)


class Target:
    """A LoadedModel seen as "the target": the model whose output we must reproduce exactly."""

    def __init__(self, lm: LoadedModel) -> None:
        llama.check_supported(lm.model)
        self.lm = lm
        self.model = lm.model

    def new_cache(self) -> KVCache:
        return KVCache()

    @torch.inference_mode()
    def forward(self, cache: KVCache, input_ids: list[int], hidden_layers: tuple[int, ...] = (),
                last_only: bool = False, tree: list[int] | None = None) -> ForwardOutput:
        """Run `input_ids` on top of `cache` (which grows by len(input_ids)); `tree`: the rows' parents
        when they are a draft tree (`llama.forward`)."""
        ids = torch.tensor([input_ids], device=self.lm.device)  # (1, n)
        logits, hidden = llama.forward(self.model, cache, ids, hidden_layers, last_only, tree)
        return ForwardOutput(logits[0].float(), {layer: h[0] for layer, h in hidden.items()})

    @staticmethod
    def rollback(cache: KVCache, n: int) -> None:
        """Forget the last n positions (rejected drafts, unconverged Jacobi guesses)."""
        if n > 0:
            cache.crop(-n)

    @staticmethod
    def keep(cache: KVCache, new: int, rows: list[int]) -> None:
        """After a forward of `new` rows, keep only `rows` of them (a tree's accepted root path, `KVCache.keep`)."""
        cache.keep(new, rows)

    @staticmethod
    def cache_bytes(cache: KVCache) -> int:
        return cache.nbytes()
