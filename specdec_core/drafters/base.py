"""The one small interface every drafter implements (cf. transformers' CandidateGenerator).

A drafter proposes up to k tokens with their q-distributions, then observes what the target
accepted. The decode loop knows nothing else about it, so adding a drafter touches no loop.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from ..sampling import SamplingParams


@dataclass
class Draft:
    tokens: list[int]  # at most k proposed token ids (may be empty: then the step is a plain AR step)
    q: torch.Tensor | None  # (len(tokens), V) draft distributions; None = deterministic one-hot proposals
    overhead_s: float = 0.0  # time spent *simulating* a drafter (sim's oracle), excluded from draft time


class Drafter(ABC):
    """Proposes draft tokens for one request; holds that request's drafter state (e.g. its KV cache)."""

    name: str = "drafter"
    # Target layers whose hidden states this drafter wants from each verification forward
    # (parallel heads / feature-level drafters read them; the forward is not repeated for them).
    hidden_layers: tuple[int, ...] = ()

    def reset(self, prompt_ids: list[int]) -> None:
        """Start a new request."""

    @abstractmethod
    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        """Propose up to k tokens that continue `context` (prompt + output so far)."""

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor]) -> None:
        """Told after verification: how many drafts were accepted, the tokens appended, and the
        requested hidden states of the verification forward (layer -> (k+1, H))."""

    def memory_bytes(self) -> int:
        """Bytes this drafter holds beyond the target (its own weights and caches)."""
        return 0
