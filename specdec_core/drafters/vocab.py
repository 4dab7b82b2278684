"""A reduced output vocabulary for drafters (the FR-Spec idea): draft only the N most frequent tokens.

On this CPU the full 49,152 x 576 output projection (~4 ms a token) costs more than a whole trained
drafter layer, so model drafters project onto the rows of the N tokens the target itself uses most
(`training/vocab.py` counts them on its own generations and stores the ids, never the rows). The
rows are the target's own output head, borrowed at load time.

Losslessness does not depend on N. The drafter's logits are put back into the full vocabulary with
-inf outside the subset (`expand`), so q is an ordinary full-vocabulary distribution whose mass
outside the subset is zero: a token outside it is never drafted, verification still runs over the
whole vocabulary, greedy output stays the target's, and rejection sampling's residual max(p - q, 0)
gives those tokens their full p.
"""
from __future__ import annotations

import functools

import torch


class ReducedVocab(torch.nn.Module):
    """Token ids (N,) and the target's output-head rows for them (N, H), frozen."""

    def __init__(self, ids: torch.Tensor, lm_head_weight: torch.Tensor) -> None:
        super().__init__()
        ids = ids.to(device=lm_head_weight.device, dtype=torch.long)
        if ids.ndim != 1 or len(ids) == 0 or len(torch.unique(ids)) != len(ids):
            raise ValueError("a reduced vocabulary is a non-empty list of distinct token ids")
        self.vocab_size = lm_head_weight.shape[0]
        self.register_buffer("ids", ids, persistent=False)
        self.register_buffer("weight", lm_head_weight.detach()[ids].clone(), persistent=False)  # (N, H)
        # full id -> place in the subset, -1 outside it: labels for training, lookups for drafting
        index = torch.full((self.vocab_size,), -1, dtype=torch.long, device=ids.device)
        index[ids] = torch.arange(len(ids), device=ids.device)
        self.register_buffer("index", index, persistent=False)

    def __len__(self) -> int:
        return len(self.ids)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., N): the output head restricted to the subset."""
        return h @ self.weight.to(h.dtype).T

    def expand(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., N) -> (..., V) float32 with -inf outside the subset: what q is computed from."""
        full = torch.full((*logits.shape[:-1], self.vocab_size), float("-inf"), device=logits.device)
        full[..., self.ids] = logits.float()
        return full


@functools.lru_cache(maxsize=16)
def module_vocab(module: torch.nn.Module, lm_head_weight: torch.Tensor) -> ReducedVocab:
    """One vocabulary per loaded drafter module (its `vocab_ids`) and target head, shared by every
    request's drafter: the N head rows are copied once, not per request."""
    return ReducedVocab(module.vocab_ids, lm_head_weight)
